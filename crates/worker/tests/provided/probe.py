#!/usr/bin/python3.11
import http.client, json, os, time
api = os.environ["AWS_LAMBDA_RUNTIME_API"]
def call(method, path, body=b""):
    c = http.client.HTTPConnection(api, timeout=10)
    c.request(method, "/2018-06-01/runtime/" + path, body=body)
    r = c.getresponse()
    return r.status, r.read()
while True:
    c = http.client.HTTPConnection(api)
    c.request("GET", "/2018-06-01/runtime/invocation/next")
    r = c.getresponse()
    rid = r.getheader("Lambda-Runtime-Aws-Request-Id")
    event = json.loads(r.read())
    if event.get("sleep"):
        time.sleep(event["sleep"])
    seen = {
        "other_id": call("POST", "invocation/%s/response" % event.get("other_id", "x"), b"{}")[0],
        "init_error": call("POST", "init/error", b"{}")[0],
        "unknown": call("GET", "nothing/here")[0],
        "second_next": call("GET", "invocation/next")[0],
        "garbage": call("POST", "invocation/%s/response/../../x" % rid, b"{}")[0],
    }
    held, answered = [], 0
    for _ in range(20):
        h = http.client.HTTPConnection(api, timeout=10)
        held.append(h)
        try:
            h.request("GET", "/2018-06-01/runtime/nothing")
            h.getresponse().read()
            answered += 1
        except Exception:
            pass
    for h in held:
        h.close()
    seen["held_answered"] = answered
    call("POST", "invocation/%s/response" % rid, json.dumps({"me": rid, "seen": seen}).encode())
