"""TEST ONLY: hostile code. Each attack tries to leave the sandbox and reports
whether it got anywhere; the sandbox tests assert that none does."""
import ctypes
import os
import signal
import socket

_libc = ctypes.CDLL(None, use_errno=True)


def _read_host():
    # Paths that exist on the host but must not be visible in the runtime root.
    for p in ("/work", "/root/.cargo", "/var/lib/thaw", "/etc/shadow", "/proc/1/environ", "/sys/kernel"):
        if os.path.exists(p):
            return {"escaped": True, "detail": "sees " + p}
    try:
        os.chroot("/tmp")
        return {"escaped": True, "detail": "chroot allowed"}
    except OSError as e:
        return {"escaped": False, "detail": "chroot: " + e.strerror}


def _ptrace():
    r = _libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH to pid 1 (ourselves' init)
    if r == 0:
        return {"escaped": True, "detail": "ptrace attach worked"}
    return {"escaped": False, "detail": "ptrace: " + os.strerror(ctypes.get_errno())}


def _network():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        return {"escaped": False, "detail": "socket: " + e.strerror}
    try:
        s.settimeout(2)
        s.connect(("1.1.1.1", 80))
        return {"escaped": True, "detail": "connected out"}
    except OSError as e:
        return {"escaped": False, "detail": "connect: " + str(e)}


def _write_root():
    try:
        with open("/opt/thaw/owned", "w") as f:
            f.write("x")
        return {"escaped": True, "detail": "wrote to the runtime root"}
    except OSError as e:
        return {"escaped": False, "detail": "write: " + e.strerror}


def _fork_bomb():
    n = 0
    try:
        for _ in range(10000):
            if os.fork() == 0:
                try:
                    while True:
                        signal.pause()
                finally:
                    os._exit(0)
            n += 1
    except OSError as e:
        return {"escaped": n >= 10000, "detail": "fork stopped after %d: %s" % (n, e.strerror)}
    return {"escaped": True, "detail": "forked %d processes" % n}


def _alloc():
    hog = []
    for _ in range(64 * 1024):  # up to 64 GiB in 1 MiB steps
        hog.append(bytearray(1 << 20))
    return {"escaped": True, "detail": "allocated %d MiB" % len(hog)}


def _mount():
    r = _libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
    if r == 0:
        return {"escaped": True, "detail": "mount worked"}
    return {"escaped": False, "detail": "mount: " + os.strerror(ctypes.get_errno())}


ATTACKS = {
    "read_host": _read_host,
    "ptrace": _ptrace,
    "network": _network,
    "write_root": _write_root,
    "fork_bomb": _fork_bomb,
    "alloc": _alloc,
    "mount": _mount,
}


def handler(event):
    return ATTACKS[event["attack"]]()
