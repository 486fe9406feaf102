#!/usr/bin/python3.11
import http.client, json, os
api = os.environ["AWS_LAMBDA_RUNTIME_API"]
def call(method, path, body=None):
    c = http.client.HTTPConnection(api)
    c.request(method, "/2018-06-01/runtime/" + path, body=body)
    r = c.getresponse()
    return r, r.read()
restores = 0
if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
    call("GET", "restore/next")
    restores += 1
    if os.environ.get("FAIL_RESTORE"):
        call("POST", "restore/error", json.dumps({"errorMessage": "no connection", "errorType": "Restore.Failed"}))
        raise SystemExit(1)
while True:
    r, body = call("GET", "invocation/next")
    rid = r.getheader("Lambda-Runtime-Aws-Request-Id")
    call("POST", "invocation/%s/response" % rid, json.dumps({"restores": restores}))
