"""What the Lambda clients' scripts (and `thaw bench lambda`'s) share: a
function's zip as Lambda users make it, and AWS's runtime interface client
as a custom runtime's `bootstrap`."""
import io
import os
import subprocess
import sys
import zipfile

# A custom runtime's `bootstrap` that runs Lambda's Python runtime client
# (awslambdaric) on the handler Lambda names in _HANDLER. Python, not a
# shell script: the runtime root has no shell.
RIC_BOOTSTRAP = b"""#!/usr/bin/python3
import os
import sys

from awslambdaric.__main__ import main

main([sys.argv[0], os.environ["_HANDLER"]])
"""


def check(cond, what, got=None):
    if not cond:
        sys.exit("FAILED: %s (got %r)" % (what, got))


def zipped(files):
    """files: name -> (bytes, unix mode)"""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return buf.getvalue()


def tree(top):
    """Every file under `top`, as zipped() takes them (mode 0644)."""
    files = {}
    for root, _, names in os.walk(top):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                files[os.path.relpath(path, top)] = (f.read(), 0o644)
    return files


def lambda_tool(what, tools):
    """The path `scripts/lambda-tools.sh` (at `tools`) prints for `what`."""
    out = subprocess.run([tools, what], check=True, capture_output=True, text=True)
    return out.stdout.strip()
