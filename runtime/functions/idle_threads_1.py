"""idle_threads_N: helloworld from a process that keeps N-1 idle threads
(started at init, waiting on a condition variable) beside its main thread:
what threads cost a snapshot's restore. idle_threads_8 is this file under
another name; the count comes from the name."""
import os
import threading

THREADS = int(os.path.basename(__file__)[len("idle_threads_") : -len(".py")])
_wake = threading.Condition()


def _idle():
    with _wake:
        _wake.wait()


def init():
    for i in range(THREADS - 1):
        threading.Thread(target=_idle, name="idle-%d" % i, daemon=True).start()


def handler(event):
    name = event.get("name", "World")
    return {"message": "Hello, %s!" % name, "length": len(name), "threads": threading.active_count()}
