"""TEST ONLY: threads started at init that a snapshot must carry: a ticker that
keeps counting, 8 workers waiting on a threading.Condition, and a thread pool
the handler uses. Each call wakes the workers with a new round and collects
their answers, and runs a computation on the pool. {"churn": true} also
starts a thread that keeps starting and joining short-lived threads."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

WAITERS = 8
_cond = threading.Condition()
_state = {"round": 0, "answers": {}, "ticks": 0}
_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pool")


def _tick():
    while True:
        time.sleep(0.002)
        _state["ticks"] += 1


def _wait(i):
    seen = 0
    while True:
        with _cond:
            while _state["round"] == seen:
                _cond.wait()
            seen = _state["round"]
            _state["answers"][i] = seen * 100 + i
            _cond.notify_all()


def init():
    threading.Thread(target=_tick, name="ticker", daemon=True).start()
    for i in range(WAITERS):
        threading.Thread(target=_wait, args=(i,), name="waiter-%d" % i, daemon=True).start()
    # start every pool thread now, so they are part of the snapshot
    barrier = threading.Barrier(4)
    list(_pool.map(lambda _: barrier.wait(5), range(4)))


def _churn():
    # threads that come and go, racing the checkpoint's freeze
    while True:
        t = threading.Thread(target=time.sleep, args=(0.001,), name="churn")
        t.start()
        t.join()


def handler(event):
    if event.get("churn"):
        threading.Thread(target=_churn, name="churner", daemon=True).start()
    with _cond:
        _state["round"] += 1
        _state["answers"] = {}
        want = _state["round"]
        _cond.notify_all()
        deadline = time.monotonic() + 10
        while len(_state["answers"]) < WAITERS and time.monotonic() < deadline:
            _cond.wait(0.5)
        answers = sorted(_state["answers"].values())
    squares = sum(_pool.map(lambda x: x * x, range(1000)))
    return {
        "round": want,
        "answers": answers,
        "want": [want * 100 + i for i in range(WAITERS)],
        "squares": squares,
        "ticks": _state["ticks"],
        "threads": threading.active_count(),
    }
