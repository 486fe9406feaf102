"""Custom runtimes through boto3, as a Lambda user deploys them: a Go
function built with aws-lambda-go and a Rust one built with lambda_runtime,
each zipped as `bootstrap` and created as provided.al2023; the first invoke
is a restore from the snapshot taken while the bootstrap's first `next`
waited, the second warm; a Go panic and a Rust Err come back as
`Unhandled` with the runtime's error; a bootstrap that exits at init fails
the create with its words; a package without an executable bootstrap is
refused. Prints one JSON line of what it saw on success.

Environment: THAW_ENDPOINT and the daemon's key, as roundtrip.py.
"""
import json
import os
import subprocess
import sys

import boto3
import botocore.config

from function_zip import check, zipped

ENDPOINT = os.environ["THAW_ENDPOINT"]
cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)
HERE = os.path.dirname(os.path.abspath(__file__))


def bootstrap(name):
    out = subprocess.run([os.path.join(HERE, "build_bootstrap.sh"), name],
                         check=True, capture_output=True, text=True)
    with open(out.stdout.strip(), "rb") as f:
        return f.read()


last_headers = {}
lam.meta.events.register(
    "after-call.lambda.Invoke",
    lambda **kw: last_headers.update({k.lower(): v for k, v in kw["http_response"].headers.items()}))


def invoke(name, payload):
    last_headers.clear()
    r = lam.invoke(FunctionName=name, Payload=json.dumps(payload).encode())
    body = r["Payload"].read()
    return r, json.loads(body), last_headers.get("thaw-start-type")


def create(name, code, env=None):
    return lam.create_function(
        FunctionName=name, Runtime="provided.al2023", Handler="bootstrap",
        Role="arn:aws:iam::123456789012:role/any", Code={"ZipFile": code},
        Environment={"Variables": env or {}})


def refused(what, fn):
    try:
        fn()
    except lam.exceptions.InvalidParameterValueException as e:
        return str(e)
    sys.exit("FAILED: %s was accepted" % what)


seen = {}
for lang, binary in [("go", bootstrap("go-hello")), ("rust", bootstrap("rust-hello"))]:
    name = "%s-hello" % lang
    code = zipped({"bootstrap": (binary, 0o755)})
    c = create(name, code)
    check(c["Runtime"] == "provided.al2023", "%s runtime" % lang, c)
    r, out, start = invoke(name, {"name": lang})
    check(r["StatusCode"] == 200 and "FunctionError" not in r, "%s invoke" % lang, (r, out))
    check(out["hello"] == lang and out["calls"] == 1, "%s answer from the snapshot" % lang, out)
    check(out["request_id"] == r["ResponseMetadata"]["RequestId"], "%s request id" % lang,
          (out, r["ResponseMetadata"]))
    check(out["arn"].endswith(":function:" + name), "%s function ARN" % lang, out)
    check(start == "restore", "%s first invoke is a restore" % lang, start)
    r, out2, start2 = invoke(name, {"name": lang + "2"})
    check(out2["calls"] == 2 and out2["init_at"] == out["init_at"], "%s warm answer" % lang, out2)
    check(start2 == "warm", "%s second invoke is warm" % lang, start2)
    bad = {"name": "x", "panic": True} if lang == "go" else {"name": "x", "fail": True}
    r, err, _ = invoke(name, bad)
    check(r.get("FunctionError") == "Unhandled", "%s error is Unhandled" % lang, (r, err))
    want = "asked to panic: x" if lang == "go" else 'asked to fail: "x"'
    check(err.get("errorMessage") == want and err.get("errorType"), "%s error body" % lang, err)
    seen[lang] = {"first": start, "error_type": err["errorType"]}

go = bootstrap("go-hello")
msg = refused("a bootstrap that exits at init",
              lambda: create("go-broken", zipped({"bootstrap": (go, 0o755)}),
                             {"HELLO_FAIL_INIT": "no table named orders"}))
check("init failed: no table named orders" in msg, "the init error is the create's", msg)
msg = refused("a package without bootstrap",
              lambda: create("no-bootstrap", zipped({"main": (go, 0o755)})))
check("bootstrap" in msg, "no bootstrap is named", msg)
msg = refused("a bootstrap that is not executable",
              lambda: create("not-exec", zipped({"bootstrap": (go, 0o644)})))
check("not an executable" in msg, "a non-executable bootstrap is named", msg)
names = [f["FunctionName"] for f in lam.list_functions()["Functions"]]
check(sorted(names) == ["go-hello", "rust-hello"], "only the good functions exist", names)
for n in names:
    lam.delete_function(FunctionName=n)
print(json.dumps({"ok": True, "seen": seen}))
