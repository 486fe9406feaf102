"""TEST ONLY: starts a helper process that keeps running, so a checkpoint
must refuse (child processes are not captured) and name it."""
import subprocess
import sys

_children = []


def init():
    _children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]))


def handler(event):
    return {"child": _children[0].pid, "running": _children[0].poll() is None}
