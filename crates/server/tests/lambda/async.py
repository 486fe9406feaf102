"""Asynchronous invocations through boto3 (InvocationType=Event): accepted
with 202 and a request id; past the daemon's queue bound (the test sets it
to 2) refused with 429 TooManyRequestsException. Prints one JSON line with
the accepted request ids; the test reads their outcomes from the function's
log and metrics.

Environment: as roundtrip.py.
"""
import io
import json
import os
import sys
import zipfile

import boto3
import botocore.config
from botocore.exceptions import ClientError

lam = boto3.client("lambda", endpoint_url=os.environ["THAW_ENDPOINT"],
                   config=botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120))

SOURCE = '''
import json, time
def handler(event, context):
    time.sleep(event.get("sleep", 0))
    print("async saw", json.dumps(event, sort_keys=True))
    if event.get("fail"):
        raise RuntimeError("always fails")
    return {"ok": True}
'''
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("app.py", SOURCE)
lam.create_function(FunctionName="queued", Runtime="python3.13", Role="r", Handler="app.handler",
                    Code={"ZipFile": buf.getvalue()}, Timeout=10)


def event(payload):
    r = lam.invoke(FunctionName="queued", InvocationType="Event", Payload=json.dumps(payload).encode())
    if r["StatusCode"] != 202:
        sys.exit("FAILED: Event answer %r" % r)
    return r["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]


failing = event({"fail": True, "tag": "failing"})
slow = event({"sleep": 2, "tag": "slow"})
try:
    lam.invoke(FunctionName="queued", InvocationType="Event", Payload=b'{"tag": "third"}')
    sys.exit("FAILED: a third event past a queue of 2 was accepted")
except ClientError as e:
    got = (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
    if got != (429, "TooManyRequestsException"):
        sys.exit("FAILED: a full queue answered %r" % (got,))
print(json.dumps({"ok": True, "failing": failing, "slow": slow}))
