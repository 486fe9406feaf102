"""Lambda's own Node.js runtime interface client (npm's aws-lambda-ric
3.3.0, built by scripts/lambda-tools.sh) as a custom runtime through boto3:
the zip holds the client, a CommonJS function and a `bootstrap` that runs
the client on it. Checked: created as provided.al2023, the first invoke a
restore from the snapshot taken while the client waited in its first
`next` (the module's init ran once, before it), the second warm, the
handler's console.log in the log tail, a thrown Error as `Unhandled` in the
client's error shape, a new instance after the first one exits restored
from the same snapshot, and a module that throws at load failing the create
with the client's init error. Prints one JSON line of what it saw.

Environment: THAW_ENDPOINT and the daemon's key, as roundtrip.py.
"""
import base64
import json
import os
import sys

import boto3
import botocore.config

from function_zip import check, lambda_tool, tree, zipped

ENDPOINT = os.environ["THAW_ENDPOINT"]
cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)
HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "../../../../scripts/lambda-tools.sh")
with open(os.path.join(HERE, "ric-node", "bootstrap"), "rb") as f:
    BOOTSTRAP = f.read()

FUNCTION = b"""
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
    node: process.version,
  };
};
"""


def ric_files():
    """aws-lambda-ric's runtime files, as a function's node_modules holds them"""
    files = tree(lambda_tool("nodejs-ric", TOOLS))
    addon = "node_modules/aws-lambda-ric/dist/rapid-client.node"
    check(addon in files, "aws-lambda-ric's addon", sorted(files))
    return files


last_headers = {}
lam.meta.events.register(
    "after-call.lambda.Invoke",
    lambda **kw: last_headers.update({k.lower(): v for k, v in kw["http_response"].headers.items()}))


def invoke(payload, tail=False):
    last_headers.clear()
    r = lam.invoke(FunctionName="ric-node", Payload=json.dumps(payload).encode(),
                   LogType="Tail" if tail else "None")
    return r, json.loads(r["Payload"].read()), last_headers.get("thaw-start-type")


def create(name, function):
    code = dict(ric_files(), bootstrap=(BOOTSTRAP, 0o755))
    code["index.js"] = (function, 0o644)
    return lam.create_function(
        FunctionName=name, Runtime="provided.al2023", Handler="index.handler",
        Role="arn:aws:iam::123456789012:role/any", Code={"ZipFile": zipped(code)}, Timeout=10)


seen = {}
c = create("ric-node", FUNCTION)
check(c["Runtime"] == "provided.al2023", "runtime", c)
r, out, start = invoke({"name": "a"}, tail=True)
check(r["StatusCode"] == 200 and "FunctionError" not in r, "first invoke", (r, out))
check(start == "restore", "the first invoke is a restore", start)
want = {"inits": 1, "calls": 1, "hello": "a", "function": "ric-node", "time_left": True}
check({k: out.get(k) for k in want} == want, "state after the restore", out)
check(out["request_id"] == r["ResponseMetadata"]["RequestId"], "request id",
      (out, r["ResponseMetadata"]))
check(out["arn"].endswith(":function:ric-node"), "function ARN", out)
log = base64.b64decode(r["LogResult"]).decode()
check("handling a" in log, "the handler's console.log in the log tail", log)
seen["first"] = start
seen["node"] = out["node"]

r, out, start = invoke({"name": "b"})
check(start == "warm" and out["calls"] == 2, "the warm invoke", (start, out))

r, err, _ = invoke({"name": "c", "fail": True})
check(r.get("FunctionError") == "Unhandled", "a thrown Error is Unhandled", (r, err))
# the client posts its frames as `trace`; they come back as Lambda's stackTrace
check(err.get("errorType") == "Error" and err.get("errorMessage") == "asked to fail: c"
      and any("index.js" in f for f in err.get("stackTrace", [])), "aws-lambda-ric's error", err)
seen["error_type"] = err["errorType"]

# the instance exits; the next invoke restores a new one from the same snapshot
r, err, _ = invoke({"name": "d", "exit": True})
check(r.get("FunctionError") == "Unhandled", "an exit is Unhandled", (r, err))
r, out, start = invoke({"name": "e"})
check(start == "restore", "the invoke after an exit is a restore", start)
check({k: out[k] for k in ("inits", "calls")} == {"inits": 1, "calls": 1},
      "the second restore's state", out)
seen["second"] = start

try:
    create("ric-node-broken", FUNCTION + b"\nthrow new Error('no table named orders');\n")
    sys.exit("FAILED: a module that throws at load was created")
except lam.exceptions.InvalidParameterValueException as e:
    check("no table named orders" in str(e), "aws-lambda-ric's init error is the create's", str(e))
names = [f["FunctionName"] for f in lam.list_functions()["Functions"]]
check(names == ["ric-node"], "only the good function exists", names)
lam.delete_function(FunctionName="ric-node")
print(json.dumps({"ok": True, "seen": seen}))
