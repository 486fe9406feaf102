"""TEST ONLY: starts a background thread (the agent no longer refuses one: a
checkpoint captures it)."""
import threading
import time

_threads = []


def handler(event):
    t = threading.Thread(target=time.sleep, args=(3600,), name="sleeper", daemon=True)
    t.start()
    _threads.append(t)
    return {"threads": threading.active_count()}
