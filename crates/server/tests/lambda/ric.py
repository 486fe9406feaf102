"""Lambda's own Python runtime interface client (awslambdaric 4.2.2, PyPI,
pinned in scripts/lambda-tools.sh) as a custom runtime through boto3: the
zip holds awslambdaric, the function and a `bootstrap` that runs
awslambdaric's main, as Lambda's docs show for a custom runtime. The
function registers SnapStart hooks with AWS's own snapshot_restore_py
(awslambdaric's dependency, in the zip). Checked: created as
provided.al2023, the first invoke a restore from the snapshot taken while
awslambdaric waited in `restore/next` (its before-snapshot hook ran once
before it, its after-restore hook once after), the second warm, the
handler's print in the log tail, its exception as `Unhandled` in
awslambdaric's error shape, a new instance after the first one exits
restored from the same snapshot, and an import error failing the create
with awslambdaric's init error. Prints one JSON line of what it saw.

Environment: THAW_ENDPOINT and the daemon's key, as roundtrip.py.
"""
import base64
import json
import os
import sys

import boto3
import botocore.config

from function_zip import RIC_BOOTSTRAP, check, lambda_tool, tree, zipped

ENDPOINT = os.environ["THAW_ENDPOINT"]
cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)
HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "../../../../scripts/lambda-tools.sh")

FUNCTION = b"""
import os
from snapshot_restore_py import register_after_restore, register_before_snapshot

state = {"inits": 0, "before": 0, "after": 0, "calls": 0}
state["inits"] += 1


@register_before_snapshot
def before():
    state["before"] += 1


@register_after_restore
def after():
    state["after"] += 1


def handler(event, context):
    if event.get("fail"):
        raise ValueError("asked to fail: %s" % event["name"])
    if event.get("exit"):
        os._exit(3)
    state["calls"] += 1
    print("handling %s" % event["name"])
    return dict(state, hello=event["name"], request_id=context.aws_request_id,
                function=context.function_name, arn=context.invoked_function_arn,
                time_left=context.get_remaining_time_in_millis() > 0,
                init_type=os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE"))
"""


def ric_files():
    """awslambdaric's package tree, as pip installed it for the root's CPython 3.11"""
    files = tree(lambda_tool("awslambdaric", TOOLS))
    check("awslambdaric/__main__.py" in files, "awslambdaric's package", sorted(files)[:5])
    return files


last_headers = {}
lam.meta.events.register(
    "after-call.lambda.Invoke",
    lambda **kw: last_headers.update({k.lower(): v for k, v in kw["http_response"].headers.items()}))


def invoke(payload, tail=False):
    last_headers.clear()
    r = lam.invoke(FunctionName="ric", Payload=json.dumps(payload).encode(),
                   LogType="Tail" if tail else "None")
    return r, json.loads(r["Payload"].read()), last_headers.get("thaw-start-type")


def create(name, function):
    code = dict(ric_files(), bootstrap=(RIC_BOOTSTRAP, 0o755))
    code["lambda_function.py"] = (function, 0o644)
    return lam.create_function(
        FunctionName=name, Runtime="provided.al2023", Handler="lambda_function.handler",
        Role="arn:aws:iam::123456789012:role/any", Code={"ZipFile": zipped(code)}, Timeout=10)


seen = {}
c = create("ric", FUNCTION)
check(c["Runtime"] == "provided.al2023", "runtime", c)
r, out, start = invoke({"name": "a"}, tail=True)
check(r["StatusCode"] == 200 and "FunctionError" not in r, "first invoke", (r, out))
check(start == "restore", "the first invoke is a restore", start)
want = {"inits": 1, "before": 1, "after": 1, "calls": 1, "hello": "a", "function": "ric",
        "time_left": True, "init_type": "snap-start"}
check({k: out.get(k) for k in want} == want, "state after the restore", out)
check(out["request_id"] == r["ResponseMetadata"]["RequestId"], "request id",
      (out, r["ResponseMetadata"]))
check(out["arn"].endswith(":function:ric"), "function ARN", out)
log = base64.b64decode(r["LogResult"]).decode()
check("handling a" in log, "the handler's print in the log tail", log)
seen["first"] = start

r, out, start = invoke({"name": "b"})
check(start == "warm" and out["calls"] == 2 and out["after"] == 1, "the warm invoke", (start, out))

r, err, _ = invoke({"name": "c", "fail": True})
check(r.get("FunctionError") == "Unhandled", "an exception is Unhandled", (r, err))
check(err.get("errorType") == "ValueError" and err.get("errorMessage") == "asked to fail: c"
      and isinstance(err.get("stackTrace"), list), "awslambdaric's error shape", err)
seen["error_type"] = err["errorType"]

# the instance exits; the next invoke restores a new one from the same snapshot
r, err, _ = invoke({"name": "d", "exit": True})
check(r.get("FunctionError") == "Unhandled", "an exit is Unhandled", (r, err))
r, out, start = invoke({"name": "e"})
check(start == "restore", "the invoke after an exit is a restore", start)
check({k: out[k] for k in ("inits", "before", "after", "calls")}
      == {"inits": 1, "before": 1, "after": 1, "calls": 1}, "the second restore's state", out)
seen["second"] = start

try:
    create("ric-broken", FUNCTION + b"\nraise RuntimeError('no table named orders')\n")
    sys.exit("FAILED: a module that raises at import was created")
except lam.exceptions.InvalidParameterValueException as e:
    check("no table named orders" in str(e), "awslambdaric's init error is the create's", str(e))
names = [f["FunctionName"] for f in lam.list_functions()["Functions"]]
check(names == ["ric"], "only the good function exists", names)
lam.delete_function(FunctionName="ric")
print(json.dumps({"ok": True, "seen": seen}))
