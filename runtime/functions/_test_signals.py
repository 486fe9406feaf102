"""TEST ONLY: signal state set at init, checked by the function itself. A
fresh instance and every restore of its snapshot must answer the first
invocation alike:

- a SIGUSR1 handler that counts, run by a signal the handler sends itself;
- faulthandler enabled (handlers on SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL);
- SIGPIPE still ignored: a write to a closed pipe raises instead of killing;
- SIGALRM taken by the function with an hour-long ITIMER_REAL: the time left
  carried over (and the agent's own timeout leaves it alone);
- a CPU-time timer (ITIMER_PROF) with 100 ms left at init, still armed at the
  first invocation and firing once the function burns that much CPU;
- SIGUSR2 blocked at init and sent to the process (queued for it), and two
  queued real-time signals with their siginfo (sigqueue: SI_QUEUE), one more
  sent to the main thread only (pthread_kill);
- every signal's kernel disposition (handler, flags) as it was at init.

event {"change": true} also installs another SIGUSR1 handler and checks it runs."""
import ctypes
import faulthandler
import os
import signal
import threading
import time

_libc = ctypes.CDLL(None, use_errno=True)


class _Sigaction(ctypes.Structure):
    # glibc's struct sigaction on x86_64
    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


def _kernel_dispositions():
    out = {}
    for sig in range(1, 65):
        if sig in (signal.SIGKILL, signal.SIGSTOP, 32, 33):  # 32, 33: glibc's own
            continue
        a = _Sigaction()
        if _libc.sigaction(sig, None, ctypes.byref(a)) != 0:
            raise OSError(ctypes.get_errno(), "sigaction(%d)" % sig)
        out[sig] = (a.handler or 0, a.flags)
    return out


counts = {"usr1": 0, "usr2": 0, "alrm": 0, "prof": 0, "changed": 0}


def _count(name):
    def h(signum, frame):
        counts[name] += 1

    return h


RT_PROCESS = signal.SIGRTMIN + 1
RT_THREAD = signal.SIGRTMIN + 2


class _Sigval(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]


def init():
    signal.signal(signal.SIGUSR1, _count("usr1"))
    signal.signal(signal.SIGUSR2, _count("usr2"))
    signal.signal(signal.SIGALRM, _count("alrm"))
    signal.signal(signal.SIGPROF, _count("prof"))
    faulthandler.enable()
    signal.setitimer(signal.ITIMER_REAL, 3600)
    signal.setitimer(signal.ITIMER_PROF, 0.1)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2, RT_PROCESS, RT_THREAD})
    os.kill(os.getpid(), signal.SIGUSR2)
    for v in (7, 8):
        if _libc.sigqueue(os.getpid(), RT_PROCESS, _Sigval(sival_int=v)) != 0:
            raise OSError(ctypes.get_errno(), "sigqueue")
    signal.pthread_kill(threading.get_ident(), RT_THREAD)
    global AT_INIT
    AT_INIT = _kernel_dispositions()


def handler(event):
    out = {}
    # what the kernel holds, before anything below changes it
    now = _kernel_dispositions()
    out["dispositions_same"] = now == AT_INIT
    out["dispositions_differ"] = sorted(s for s in AT_INIT if now.get(s) != AT_INIT[s])
    out["pending"] = sorted(int(s) for s in signal.sigpending())
    out["sigpipe_ignored"] = now[signal.SIGPIPE][0] == 1
    out["faulthandler"] = faulthandler.is_enabled() and all(
        now[s][0] not in (0, 1) for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT, signal.SIGILL)
    )
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    out["alarm_left"] = 3000 < left <= 3600
    out["prof_armed"] = counts["prof"] == 0 and signal.getitimer(signal.ITIMER_PROF)[0] > 0
    # queued real-time signals, with what their siginfo says
    rt = []
    for sig in (RT_PROCESS, RT_PROCESS, RT_THREAD):
        info = signal.sigtimedwait({sig}, 0)
        rt.append(None if info is None else [info.si_signo - signal.SIGRTMIN, info.si_code])
    out["rt"] = rt
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
    os.kill(os.getpid(), signal.SIGUSR1)
    # burn CPU until the CPU-time timer fires (5 s at most)
    t0 = time.monotonic()
    while counts["prof"] == 0 and time.monotonic() - t0 < 5:
        sum(range(1000))
    r, w = os.pipe()
    os.close(r)
    try:
        os.write(w, b"x")
        out["epipe"] = False
    except BrokenPipeError:
        out["epipe"] = True
    finally:
        os.close(w)
    if (event or {}).get("change"):
        signal.signal(signal.SIGUSR1, _count("changed"))
        os.kill(os.getpid(), signal.SIGUSR1)
    out["counts"] = dict(counts)
    out["ok"] = (
        out["dispositions_same"]
        and out["sigpipe_ignored"]
        and out["faulthandler"]
        and out["alarm_left"]
        and out["prof_armed"]
        and out["epipe"]
        and counts["usr1"] == 1
        and counts["usr2"] == 1
        and counts["prof"] == 1
        and rt[:2] == [[1, -1], [1, -1]]
        and rt[2] is not None
        and rt[2][0] == 2
    )
    return out
