"""What Lambda's API refuses, through boto3: requests signed with a wrong
secret, for another region, with a stale date or not at all (403, and
nothing changes); hostile packages (paths with .., absolute paths, links, a
decompression bomb), an unknown runtime, a payload over 6 MB. Prints one
JSON line of the error names seen.

Environment: as roundtrip.py.
"""
import datetime
import io
import json
import os
import stat
import sys
import zipfile

import boto3
import botocore
import botocore.auth
import botocore.config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["THAW_ENDPOINT"]
cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)
seen = {}

HANDLER = "def lambda_handler(event, context):\n    return {'ok': True}\n"


def zipped(entries):
    """entries: (name, data, mode or None)"""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.external_attr = mode << 16
            z.writestr(info, data)
    return buf.getvalue()


def check(cond, what, got=None):
    if not cond:
        sys.exit("FAILED: %s (got %r)" % (what, got))


def refused(what, status, code, call):
    try:
        call()
    except ClientError as e:
        got = (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
        check(got == (status, code), what, (got, e.response["Error"].get("Message")))
        seen[what] = code
        return e.response["Error"].get("Message", "")
    check(False, what + " must be refused")


def create(client, name, code, runtime="python3.12"):
    return client.create_function(FunctionName=name, Runtime=runtime, Role="r",
                                  Handler="lambda_function.lambda_handler", Code={"ZipFile": code})


good = zipped([("lambda_function.py", HANDLER, None)])
create(lam, "kept", good)

# signatures: a wrong secret, another region, no signature, a stale date
wrong = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg,
                     aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"][::-1])
refused("wrong secret creates", 403, "InvalidSignatureException", lambda: create(wrong, "intruder", good))
refused("wrong secret deletes", 403, "InvalidSignatureException", lambda: wrong.delete_function(FunctionName="kept"))
refused("wrong secret invokes", 403, "InvalidSignatureException", lambda: wrong.invoke(FunctionName="kept", Payload=b"{}"))
unknown_key = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg, aws_access_key_id="AKIANOTTHEDAEMONSKEY",
                           aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
refused("unknown key", 403, "UnrecognizedClientException", lambda: unknown_key.list_functions())
elsewhere = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg, region_name="eu-west-3")
refused("other region", 403, "InvalidSignatureException", lambda: elsewhere.delete_function(FunctionName="kept"))
unsigned = boto3.client("lambda", endpoint_url=ENDPOINT,
                        config=botocore.config.Config(signature_version=botocore.UNSIGNED, retries={"max_attempts": 1}))
refused("unsigned", 403, "MissingAuthenticationTokenException", lambda: unsigned.delete_function(FunctionName="kept"))
real_now = botocore.auth.get_current_datetime
botocore.auth.get_current_datetime = lambda: real_now() - datetime.timedelta(minutes=20)
msg = refused("stale date", 403, "InvalidSignatureException", lambda: lam.delete_function(FunctionName="kept"))
check("expired" in msg, "stale date says so", msg)
botocore.auth.get_current_datetime = real_now
# nothing changed: the function is there, the intruder's is not
check(lam.get_function(FunctionName="kept")["Configuration"]["FunctionName"] == "kept", "kept survives")
refused("intruder absent", 404, "ResourceNotFoundException", lambda: lam.get_function(FunctionName="intruder"))

# hostile packages
refused("zip with ..", 400, "InvalidParameterValueException",
        lambda: create(lam, "dotdot", zipped([("lambda_function.py", HANDLER, None), ("../escape.py", "x=1", None)])))
refused("zip with an absolute path", 400, "InvalidParameterValueException",
        lambda: create(lam, "absolute", zipped([("lambda_function.py", HANDLER, None), ("/etc/evil.py", "x=1", None)])))
refused("zip with a link", 400, "InvalidParameterValueException",
        lambda: create(lam, "link", zipped([("lambda_function.py", HANDLER, None), ("passwd", "/etc/passwd", stat.S_IFLNK | 0o777)])))
bomb = zipped([("lambda_function.py", HANDLER, None), ("zeros.bin", b"\0" * (256 << 20), None)])
check(len(bomb) < 1 << 20, "the bomb is small", len(bomb))
refused("zip bomb", 400, "InvalidParameterValueException", lambda: create(lam, "bomb", bomb))
refused("not a zip", 400, "InvalidParameterValueException", lambda: create(lam, "notzip", b"PK\x03\x04 garbage"))
msg = refused("unknown runtime", 400, "InvalidParameterValueException", lambda: create(lam, "ruby", good, runtime="ruby3.2"))
check("python3.12" in msg and "nodejs20.x" in msg and "provided.al2023" in msg,
      "the refusal names the supported runtimes", msg)
msg = refused("custom runtime without a bootstrap", 400, "InvalidParameterValueException",
              lambda: create(lam, "custom", good, runtime="provided.al2023"))
check("bootstrap" in msg, "the refusal names the missing bootstrap", msg)
refused("uppercase name", 400, "InvalidParameterValueException", lambda: create(lam, "MyFunction", good))
for n in ("dotdot", "absolute", "link", "bomb", "notzip", "ruby", "custom"):
    refused("refused %s left nothing" % n, 404, "ResourceNotFoundException", lambda: lam.get_function(FunctionName=n))

# payloads
big = b'{"x": "' + b"a" * (6 * 1024 * 1024 + 100) + b'"}'
refused("payload over 6 MB", 413, "RequestEntityTooLargeException", lambda: lam.invoke(FunctionName="kept", Payload=big))
refused("payload not JSON", 400, "InvalidRequestContentException", lambda: lam.invoke(FunctionName="kept", Payload=b"{nope"))
refused("unknown function", 404, "ResourceNotFoundException", lambda: lam.invoke(FunctionName="absent", Payload=b"{}"))
refused("unknown alias", 404, "ResourceNotFoundException", lambda: lam.invoke(FunctionName="kept", Qualifier="nope", Payload=b"{}"))
refused("unknown version", 404, "ResourceNotFoundException", lambda: lam.invoke(FunctionName="kept", Qualifier="7", Payload=b"{}"))
r = lam.invoke(FunctionName="kept", Payload=b"{}")
check(json.loads(r["Payload"].read()) == {"ok": True}, "kept still answers")
lam.delete_function(FunctionName="kept")
print(json.dumps({"ok": True, "refused": seen}))
