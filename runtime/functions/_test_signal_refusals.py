"""TEST ONLY: signal state a snapshot cannot carry, which a checkpoint must
refuse by name: a POSIX timer (timer_create) made at init, and a signal
queued for a thread other than the main one (blocked there)."""
import ctypes
import signal
import threading

_libc = ctypes.CDLL(None, use_errno=True)
CLOCK_MONOTONIC = 1

_timer = ctypes.c_void_p()
if _libc.timer_create(CLOCK_MONOTONIC, None, ctypes.byref(_timer)) != 0:
    raise OSError(ctypes.get_errno(), "timer_create")

_ready = threading.Event()


def _blocked_waiter():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    _ready.set()
    threading.Event().wait()


_t = threading.Thread(target=_blocked_waiter, name="blocked", daemon=True)
_t.start()
_ready.wait()
signal.pthread_kill(_t.ident, signal.SIGUSR2)


def handler(event):
    return {"ok": True}
