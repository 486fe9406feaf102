"""Lambda's API through boto3, as a Lambda user would call it: create from a
zip, invoke (sync with the log tail, async, dry run), update code and
configuration, publish versions, aliases, invoke by alias, list with
pagination, delete. Every answer is checked; the first invoke of each
version must be a restore (thaw's `thaw-start-type` header, read from the
raw response). Prints one JSON line of what it saw on success.

Environment: THAW_ENDPOINT (http://127.0.0.1:PORT), AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION (from `thaw lambda credentials`).
"""
import base64
import io
import json
import os
import sys
import time
import zipfile

import boto3
import botocore.config

ENDPOINT = os.environ["THAW_ENDPOINT"]
cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)

SOURCE_V1 = '''
import os
COUNT = 0

def lambda_handler(event, context):
    global COUNT
    COUNT += 1
    print("hello from", context.function_name, "event", json_dumps(event))
    if event.get("fail"):
        raise ValueError("asked to fail: %s" % event["fail"])
    return {"version": "v1", "greeting": os.environ.get("GREETING"), "count": COUNT,
            "request_id": context.aws_request_id,
            "remaining_ms_positive": context.get_remaining_time_in_millis() > 0}

def json_dumps(x):
    import json
    return json.dumps(x, sort_keys=True)
'''

SOURCE_V2 = SOURCE_V1.replace('"version": "v1"', '"version": "v2"')


def zipped(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def check(cond, what, got=None):
    if not cond:
        sys.exit("FAILED: %s (got %r)" % (what, got))


# the start type thaw reports in its own header, captured per response
last_headers = {}


def keep_headers(http_response, **kwargs):
    last_headers.clear()
    last_headers.update({k.lower(): v for k, v in http_response.headers.items()})


lam.meta.events.register("after-call.lambda.Invoke", lambda **kw: keep_headers(kw["http_response"]))


def invoke(name, payload, **kw):
    r = lam.invoke(FunctionName=name, Payload=json.dumps(payload).encode(), **kw)
    body = r["Payload"].read()
    return r, (json.loads(body) if body else None), last_headers.get("thaw-start-type")


name = os.environ.get("FUNCTION", "boto-hello")
seen = {}

# create
c = lam.create_function(
    FunctionName=name, Runtime="python3.12", Role="arn:aws:iam::123456789012:role/x",
    Handler="lambda_function.lambda_handler", Code={"ZipFile": zipped({"lambda_function.py": SOURCE_V1})},
    Description="first", Timeout=10, MemorySize=256, Environment={"Variables": {"GREETING": "hi"}})
check(c["FunctionName"] == name and c["Version"] == "$LATEST", "create answer", c)
check(c["Runtime"] == "python3.12" and c["MemorySize"] == 256 and c["Timeout"] == 10, "create config", c)
check(c["State"] == "Active" and c["CodeSize"] > 0 and len(base64.b64decode(c["CodeSha256"])) == 32, "create state", c)

# a second create of the same name is a conflict
try:
    lam.create_function(FunctionName=name, Runtime="python3.12", Role="r", Handler="lambda_function.lambda_handler",
                        Code={"ZipFile": zipped({"lambda_function.py": SOURCE_V1})})
    check(False, "a second create must fail")
except lam.exceptions.ResourceConflictException:
    pass

g = lam.get_function(FunctionName=name)
check(g["Configuration"]["Environment"]["Variables"] == {"GREETING": "hi"}, "get env", g)
check(g["Configuration"]["Description"] == "first", "get description", g)

# sync invoke with the log tail: the first one a restore, the next warm
r, out, start = invoke(name, {"n": 1}, LogType="Tail")
check(r["StatusCode"] == 200 and "FunctionError" not in r, "sync invoke", r)
check(out["version"] == "v1" and out["greeting"] == "hi" and out["remaining_ms_positive"], "sync payload", out)
check(start == "restore", "first invoke of $LATEST is a restore", start)
timing = last_headers.get("server-timing", "")
check("restore;dur=" in timing and "total;dur=" in timing, "a restore's Server-Timing", timing)
check(r["ExecutedVersion"] == "$LATEST", "executed version", r.get("ExecutedVersion"))
log = base64.b64decode(r["LogResult"]).decode()
check("hello from" in log and '"n": 1' in log and "REPORT RequestId" in log, "log tail", log)
check(out["request_id"] in log, "log tail names the request", log)
seen["first_start"] = start
r, out, start = invoke(name, {"n": 2})
check(start == "warm" and out["count"] >= 2, "second invoke warm", (start, out))
timing = last_headers.get("server-timing", "")
check("restore;dur=" not in timing and "exec;dur=" in timing, "a warm start's Server-Timing", timing)

# the function's own error: 200, X-Amz-Function-Error, Lambda's error shape
r, out, _ = invoke(name, {"fail": "on purpose"})
check(r["StatusCode"] == 200 and r.get("FunctionError") == "Unhandled", "function error header", r)
check(out["errorType"] == "ValueError" and "on purpose" in out["errorMessage"] and out["stackTrace"], "error payload", out)

# dry run and async
r = lam.invoke(FunctionName=name, InvocationType="DryRun")
check(r["StatusCode"] == 204, "dry run", r)
r = lam.invoke(FunctionName=name, InvocationType="Event", Payload=b'{"async": true}')
check(r["StatusCode"] == 202, "event accepted", r)

# update code, then configuration
u = lam.update_function_code(FunctionName=name, ZipFile=zipped({"lambda_function.py": SOURCE_V2}))
check(u["CodeSha256"] != c["CodeSha256"] and u["RevisionId"] != c["RevisionId"], "code update", u)
r, out, start = invoke(name, {})
check(out["version"] == "v2", "new code runs", out)
u = lam.update_function_configuration(FunctionName=name, Environment={"Variables": {"GREETING": "hello"}},
                                      MemorySize=320, Description="second")
check(u["MemorySize"] == 320 and u["Description"] == "second", "config update", u)
r, out, start = invoke(name, {})
check(out["greeting"] == "hello" and out["version"] == "v2", "new config runs", out)

# a stale RevisionId is refused
try:
    lam.update_function_configuration(FunctionName=name, Description="x", RevisionId=c["RevisionId"])
    check(False, "a stale revision must fail")
except lam.exceptions.PreconditionFailedException:
    pass

# publish version 1 (v2 code, GREETING=hello), then change $LATEST and publish 2
p1 = lam.publish_version(FunctionName=name, Description="one")
check(p1["Version"] == "1" and p1["FunctionArn"].endswith(":%s:1" % name), "publish 1", p1)
again = lam.publish_version(FunctionName=name)
check(again["Version"] == "1", "publishing an unchanged function gives its version back", again)
lam.update_function_configuration(FunctionName=name, Environment={"Variables": {"GREETING": "bonjour"}})
p2 = lam.publish_version(FunctionName=name)
check(p2["Version"] == "2", "publish 2", p2)
versions = [v["Version"] for v in lam.list_versions_by_function(FunctionName=name)["Versions"]]
check(versions == ["$LATEST", "1", "2"], "versions", versions)

# each version: its own snapshot, restored on its first invoke, unchanged by $LATEST
r, out, start = invoke(name, {}, Qualifier="1")
check(out["greeting"] == "hello" and r["ExecutedVersion"] == "1" and start == "restore", "version 1", (out, r.get("ExecutedVersion"), start))
r, out, start = invoke(name + ":2", {})
check(out["greeting"] == "bonjour" and r["ExecutedVersion"] == "2" and start == "restore", "version 2", (out, start))
seen["version_starts"] = ["restore", "restore"]
try:
    lam.update_function_configuration(FunctionName=name + ":1", Description="no")
    check(False, "a published version cannot change")
except lam.exceptions.InvalidParameterValueException:
    pass

# aliases
a = lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1", Description="prod")
check(a["FunctionVersion"] == "1" and a["AliasArn"].endswith(":live"), "create alias", a)
r, out, _ = invoke(name, {}, Qualifier="live")
check(r["ExecutedVersion"] == "1" and out["greeting"] == "hello", "invoke by alias", (r.get("ExecutedVersion"), out))
a = lam.update_alias(FunctionName=name, Name="live", FunctionVersion="2")
check(a["FunctionVersion"] == "2", "update alias", a)
r, out, _ = invoke(name + ":live", {})
check(r["ExecutedVersion"] == "2" and out["greeting"] == "bonjour", "invoke by moved alias", (r.get("ExecutedVersion"), out))
check(lam.get_alias(FunctionName=name, Name="live")["FunctionVersion"] == "2", "get alias")
try:
    lam.delete_function(FunctionName=name, Qualifier="2")
    check(False, "deleting an aliased version must fail")
except lam.exceptions.ResourceConflictException:
    pass
lam.delete_alias(FunctionName=name, Name="live")
try:
    lam.get_alias(FunctionName=name, Name="live")
    check(False, "a deleted alias must be gone")
except lam.exceptions.ResourceNotFoundException:
    pass

# list with pagination: two more functions, pages of two
for extra in ("a", "b"):
    lam.create_function(FunctionName="%s-%s" % (name, extra), Runtime="python3.11", Role="r",
                        Handler="lambda_function.lambda_handler",
                        Code={"ZipFile": zipped({"lambda_function.py": SOURCE_V1})})
names, marker, pages = [], None, 0
while True:
    kw = {"MaxItems": 2}
    if marker:
        kw["Marker"] = marker
    page = lam.list_functions(**kw)
    pages += 1
    check(len(page["Functions"]) <= 2, "page size", page)
    names += [f["FunctionName"] for f in page["Functions"]]
    marker = page.get("NextMarker")
    if not marker:
        break
mine = sorted(n for n in names if n.startswith(name))
check(mine == sorted([name, name + "-a", name + "-b"]) and pages >= 2, "paginated list", (names, pages))
paginated = [f["FunctionName"] for p in lam.get_paginator("list_functions").paginate(PaginationConfig={"PageSize": 1}) for f in p["Functions"]]
check(sorted(paginated) == sorted(names), "boto3's paginator", paginated)

# the async invocation ran meanwhile: its output is in the function's log
# (read through thaw's own API by the test)

# delete: everything of the function goes
for n in (name, name + "-a", name + "-b"):
    lam.delete_function(FunctionName=n)
try:
    lam.get_function(FunctionName=name)
    check(False, "a deleted function must be gone")
except lam.exceptions.ResourceNotFoundException:
    pass
try:
    lam.invoke(FunctionName=name + ":1", Payload=b"{}")
    check(False, "a deleted function's versions must be gone")
except lam.exceptions.ResourceNotFoundException:
    pass

print(json.dumps({"ok": True, **seen}))
