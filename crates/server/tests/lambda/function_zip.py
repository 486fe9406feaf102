"""What the Lambda clients' scripts (and `thaw bench lambda`'s) share: a
function's zip as Lambda users make it, and AWS's runtime interface client
as a custom runtime's `bootstrap`."""
import io
import os
import subprocess
import sys
import zipfile

# ric-hello/: a custom runtime's `bootstrap` that runs Lambda's Python
# runtime client (awslambdaric) on the handler in _HANDLER, and a function
# for it (`thaw bench lambda` names the directory in RIC_HELLO_DIR)
RIC_HELLO = os.environ.get("RIC_HELLO_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "ric-hello")
with open(os.path.join(RIC_HELLO, "bootstrap"), "rb") as f:
    RIC_BOOTSTRAP = f.read()


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
