"""TEST ONLY: threads the agent's own checks never see (threading knows none
of them but the renamed one, and that one under another name), started by
a call: {"start": [KIND, ...]}, KIND one of
  "clone":    a raw clone(CLONE_VM|..|CLONE_THREAD) through ctypes, no TLS of its
              own, no rseq, no robust list, blocked in pause(2)
  "pthread":  a libc pthread_create of pause(3), outside Python's threading
  "renamed":  a Python thread that renames itself (prctl PR_SET_NAME) and then
              answers each call's round through a Condition
  "vm_child": clone(CLONE_VM) without CLONE_THREAD: a process sharing our memory
  "vfork_thread": a Python thread that clones a thread with CLONE_VFORK; the
              new thread pauses and never execs or exits, so the Python thread
              waits in clone for good, uninterruptibly (state D), with no
              child process
{} answers the renamed thread's round: {"round": N, "answer": N * 7}."""
import ctypes
import mmap
import threading

_libc = ctypes.CDLL(None, use_errno=True)
_cond = threading.Condition()
_state = {"round": 0, "answer": None}
_keep = []  # stacks and thread ids that must outlive the call

CLONE_VM = 0x100
CLONE_FS = 0x200
CLONE_FILES = 0x400
CLONE_SIGHAND = 0x800
CLONE_THREAD = 0x10000
CLONE_SYSVSEM = 0x40000
CLONE_VFORK = 0x4000
SYS_pause = 34
PR_SET_NAME = 15
STACK = 64 * 1024


def _raw_clone(flags):
    # fn = syscall(2) itself, arg = SYS_pause: the child runs pause() on a
    # stack of our own and never touches Python
    stack = mmap.mmap(-1, STACK, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    _keep.append(stack)
    top = ctypes.addressof(ctypes.c_char.from_buffer(stack)) + STACK - 64
    clone = _libc.clone
    clone.restype = ctypes.c_int
    clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    fn = ctypes.cast(_libc.syscall, ctypes.c_void_p).value
    tid = clone(fn, top, flags, SYS_pause)
    if tid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    return tid


def _pthread():
    tid = ctypes.c_ulong()
    fn = ctypes.cast(_libc.pause, ctypes.c_void_p).value
    create = _libc.pthread_create
    create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    err = create(ctypes.byref(tid), None, fn, None)
    if err:
        raise OSError(err, "pthread_create")
    _keep.append(tid)


def _renamed(ready):
    _libc.prctl(PR_SET_NAME, b"renamed-worker", 0, 0, 0)
    seen = 0
    with _cond:
        ready.set()
        while True:
            while _state["round"] == seen:
                _cond.wait()
            seen = _state["round"]
            _state["answer"] = seen * 7
            _cond.notify_all()


THREAD_FLAGS = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM


def handler(event):
    started = []
    for kind in event.get("start", []):
        if kind == "clone":
            started.append(_raw_clone(THREAD_FLAGS))
        elif kind == "vfork_thread":
            # ctypes lets the GIL go for the call, which never returns
            args = (THREAD_FLAGS | CLONE_VFORK,)
            threading.Thread(target=_raw_clone, args=args, daemon=True).start()
        elif kind == "vm_child":
            started.append(_raw_clone(CLONE_VM))
        elif kind == "pthread":
            _pthread()
        elif kind == "renamed":
            ready = threading.Event()
            threading.Thread(target=_renamed, args=(ready,), daemon=True).start()
            ready.wait(5)
        else:
            raise ValueError("unknown kind %r" % kind)
    with _cond:
        _state["round"] += 1
        _state["answer"] = None
        _cond.notify_all()
        if any(t.name != "MainThread" for t in threading.enumerate()):
            _cond.wait_for(lambda: _state["answer"] is not None, 10)
        return {
            "round": _state["round"],
            "answer": _state["answer"],
            "started": started,
            "python_threads": threading.active_count(),
        }
