"""Lambda's own runtime interface clients as custom runtimes through boto3:
`ric.py python` runs awslambdaric 4.2.2 (PyPI), `ric.py node` npm's
aws-lambda-ric 3.3.0 (both pinned and made by scripts/lambda-tools.sh). The
zip holds the client, the function and a `bootstrap` that runs the client
on it, as Lambda's docs show for a custom runtime. The Python function also
registers SnapStart hooks with AWS's own snapshot_restore_py
(awslambdaric's dependency, in the zip); the Node.js client has none.
Checked: created as provided.al2023, the first invoke a restore from the
snapshot taken while the client waited (in `restore/next` for Python, its
before-snapshot hook run once before it and its after-restore hook once
after; in its first `next` for Node.js), the module's init run once, the
second invoke warm, the handler's print in the log tail, its exception as
`Unhandled` in Lambda's error shape (frames included), a new instance after
the first one exits restored from the same snapshot, and a module that
fails at load failing the create with the client's init error. Prints one
JSON line of what it saw.

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

PYTHON_FUNCTION = b"""
import os
import platform
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
                init_type=os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE"),
                runtime=platform.python_version())
"""

NODE_FUNCTION = b"""
const state = { inits: 0, calls: 0 };
state.inits += 1;

exports.handler = async (event, context) => {
  if (event.fail) throw new Error(`asked to fail: ${event.name}`);
  if (event.exit) process.exit(3);
  state.calls += 1;
  console.log(`handling ${event.name}`);
  return {
    ...state,
    hello: event.name,
    request_id: context.awsRequestId,
    function: context.functionName,
    arn: context.invokedFunctionArn,
    time_left: context.getRemainingTimeInMillis() > 0,
    runtime: process.version,
  };
};
"""

with open(os.path.join(HERE, "ric-node", "bootstrap"), "rb") as f:
    NODE_BOOTSTRAP = f.read()

# what differs by language: the client (lambda-tools.sh's name, a file it
# must hold), the bootstrap, the function's file and handler, what the
# function does at load to fail, the exception's type, and the hooks' counts
LANGUAGES = {
    "python": dict(
        tool="awslambdaric", holds="awslambdaric/__main__.py", bootstrap=RIC_BOOTSTRAP,
        file="lambda_function.py", handler="lambda_function.handler", code=PYTHON_FUNCTION,
        broken=b"\nraise RuntimeError('no table named orders')\n", error="ValueError",
        hooks={"before": 1, "after": 1, "init_type": "snap-start"}),
    "node": dict(
        tool="nodejs-ric", holds="node_modules/aws-lambda-ric/dist/rapid-client.node",
        bootstrap=NODE_BOOTSTRAP, file="index.js", handler="index.handler", code=NODE_FUNCTION,
        broken=b"\nthrow new Error('no table named orders');\n", error="Error", hooks={}),
}
lang = LANGUAGES[sys.argv[1]]
NAME = "ric-" + sys.argv[1]


def ric_files():
    """The client's files, as the function's zip holds them"""
    files = tree(lambda_tool(lang["tool"], TOOLS))
    check(lang["holds"] in files, "the runtime client's files", sorted(files)[:5])
    return files


last_headers = {}
lam.meta.events.register(
    "after-call.lambda.Invoke",
    lambda **kw: last_headers.update({k.lower(): v for k, v in kw["http_response"].headers.items()}))


def invoke(payload, tail=False):
    last_headers.clear()
    r = lam.invoke(FunctionName=NAME, Payload=json.dumps(payload).encode(),
                   LogType="Tail" if tail else "None")
    return r, json.loads(r["Payload"].read()), last_headers.get("thaw-start-type")


def create(name, function):
    code = dict(ric_files(), bootstrap=(lang["bootstrap"], 0o755))
    code[lang["file"]] = (function, 0o644)
    return lam.create_function(
        FunctionName=name, Runtime="provided.al2023", Handler=lang["handler"],
        Role="arn:aws:iam::123456789012:role/any", Code={"ZipFile": zipped(code)}, Timeout=10)


seen = {}
c = create(NAME, lang["code"])
check(c["Runtime"] == "provided.al2023", "runtime", c)
r, out, start = invoke({"name": "a"}, tail=True)
check(r["StatusCode"] == 200 and "FunctionError" not in r, "first invoke", (r, out))
check(start == "restore", "the first invoke is a restore", start)
want = dict(lang["hooks"], inits=1, calls=1, hello="a", function=NAME, time_left=True)
check({k: out.get(k) for k in want} == want, "state after the restore", out)
check(out["request_id"] == r["ResponseMetadata"]["RequestId"], "request id",
      (out, r["ResponseMetadata"]))
check(out["arn"].endswith(":function:" + NAME), "function ARN", out)
log = base64.b64decode(r["LogResult"]).decode()
check("handling a" in log, "the handler's print in the log tail", log)
seen["first"] = start
seen["runtime"] = out.get("runtime")

r, out, start = invoke({"name": "b"})
check(start == "warm" and out["calls"] == 2 and out.get("after") == lang["hooks"].get("after"),
      "the warm invoke", (start, out))

r, err, _ = invoke({"name": "c", "fail": True})
check(r.get("FunctionError") == "Unhandled", "an exception is Unhandled", (r, err))
# (Node's client posts its frames as `trace`; they come back as stackTrace)
check(err.get("errorType") == lang["error"] and err.get("errorMessage") == "asked to fail: c"
      and any(lang["file"] in f for f in err.get("stackTrace", [])), "the error's shape", err)
seen["error_type"] = err["errorType"]

# the instance exits; the next invoke restores a new one from the same snapshot
r, err, _ = invoke({"name": "d", "exit": True})
check(r.get("FunctionError") == "Unhandled", "an exit is Unhandled", (r, err))
r, out, start = invoke({"name": "e"})
check(start == "restore", "the invoke after an exit is a restore", start)
again = dict(lang["hooks"], inits=1, calls=1)
check({k: out.get(k) for k in again} == again, "the second restore's state", out)
seen["second"] = start

try:
    create(NAME + "-broken", lang["code"] + lang["broken"])
    sys.exit("FAILED: a module that fails at load was created")
except lam.exceptions.InvalidParameterValueException as e:
    check("no table named orders" in str(e), "the client's init error is the create's", str(e))
names = [f["FunctionName"] for f in lam.list_functions()["Functions"]]
check(names == [NAME], "only the good function exists", names)
lam.delete_function(FunctionName=NAME)
print(json.dumps({"ok": True, "seen": seen}))
