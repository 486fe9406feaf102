"""TEST ONLY: every kind of descriptor a snapshot keeps, opened at init with
content and position; the handler reads and writes each one and returns
what it saw (the same answer fresh and after any restore: the first call
consumes what init left queued)."""
import ctypes
import fcntl
import os
import select
import signal
import socket
import struct

libc = ctypes.CDLL(None, use_errno=True)
ROOT_FILE = "/opt/thaw/agent.py"
BIG = 65536
_fd = {}
_keep = {}


class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class Itimerspec(ctypes.Structure):
    _fields_ = [("interval", Timespec), ("value", Timespec)]


def _timerfd(value_s, interval_s):
    fd = libc.timerfd_create(1, os.O_CLOEXEC)  # CLOCK_MONOTONIC
    if fd < 0:
        raise OSError(ctypes.get_errno(), "timerfd_create")
    t = Itimerspec()
    t.value.sec, t.value.nsec = int(value_s), int((value_s % 1) * 1e9)
    t.interval.sec, t.interval.nsec = int(interval_s), int((interval_s % 1) * 1e9)
    if libc.timerfd_settime(fd, 0, ctypes.byref(t), None) < 0:
        raise OSError(ctypes.get_errno(), "timerfd_settime")
    return fd


def _remaining(fd):
    t = Itimerspec()
    libc.timerfd_gettime(fd, ctypes.byref(t))
    return t.value.sec + t.value.nsec / 1e9


def _pattern(n):
    return bytes((i * 7 + i // 251) & 0xFF for i in range(n))


def init():
    # files: one of the read-only root, one of /tmp (read-write, positioned), an
    # append-only log, a directory, the devices
    f = open(ROOT_FILE, "rb", buffering=0)
    f.read(100)
    _keep["root"] = f
    with open("/tmp/data.txt", "w") as w:
        w.write("0123456789")
    t = open("/tmp/data.txt", "r+")
    t.seek(4)
    _keep["tmp"] = t
    _keep["log"] = open("/tmp/log.txt", "a")
    _keep["log"].write("init;")
    _keep["log"].flush()
    _fd["dir"] = os.open("/usr", os.O_RDONLY | os.O_DIRECTORY)
    _fd["null"] = os.open("/dev/null", os.O_WRONLY)
    _fd["zero"] = os.open("/dev/zero", os.O_RDONLY)
    _fd["urandom"] = os.open("/dev/urandom", os.O_RDONLY)
    # a dup shares its offset with the original
    _fd["dup"] = os.dup(_keep["root"].fileno())
    # pipes: a small one (non-blocking, inheritable read end), and a full 64 KiB one
    r, w = os.pipe()
    os.write(w, b"pipe-data")
    os.set_blocking(r, False)
    os.set_inheritable(r, True)
    _fd["pipe_r"], _fd["pipe_w"] = r, w
    r, w = os.pipe()
    os.set_blocking(w, False)
    assert os.write(w, _pattern(BIG)) == BIG
    os.set_blocking(r, False)
    _fd["big_r"], _fd["big_w"] = r, w
    # a pipe whose write end has the lower number
    r, w = os.pipe()
    os.write(w, b"reversed")
    os.dup2(w, 200)
    os.dup2(r, 201)
    os.close(r)
    os.close(w)
    _fd["rev_w"], _fd["rev_r"] = 200, 201
    # eventfds
    _fd["ev_sem"] = os.eventfd(3, os.EFD_SEMAPHORE | os.EFD_NONBLOCK)
    _fd["ev"] = os.eventfd(42, os.EFD_NONBLOCK)
    # timers: one far away (re-armed relative to the restore), one periodic
    _fd["timer_far"] = _timerfd(3600, 0)
    _fd["timer_tick"] = _timerfd(0.01, 0.01)
    # signalfd on SIGUSR2, blocked
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    mask = ctypes.c_uint64(1 << (signal.SIGUSR2 - 1))
    _fd["sig"] = libc.signalfd(-1, ctypes.byref(mask), os.O_CLOEXEC)
    # memfd with content, a position and a seal
    m = os.memfd_create("thaw-test", os.MFD_ALLOW_SEALING)
    os.write(m, b"memfd-content")
    os.lseek(m, 6, os.SEEK_SET)
    fcntl.fcntl(m, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    _fd["memfd"] = m
    # a socketpair with bytes queued both ways, a listening socket, an unbound one
    a, b = socket.socketpair()
    a.send(b"to-b")
    b.send(b"to-a")
    _keep["pair"] = (a, b)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(b"\0thaw-test-fds")
    srv.listen(5)
    _keep["listen"] = srv
    _keep["dgram"] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    # epoll over three of them: the pipe, the eventfd, a socket
    ep = select.epoll()
    ep.register(_fd["pipe_r"], select.EPOLLIN)
    ep.register(_fd["ev"], select.EPOLLIN | select.EPOLLET)
    ep.register(b.fileno(), select.EPOLLIN)
    _keep["epoll"] = ep


def handler(event):
    out = {}
    # epoll first: everything it watches has something to read
    ready = dict(_keep["epoll"].poll(0))
    out["epoll"] = sorted(
        [name, ready.get(fd, 0)] for name, fd in
        (("pipe", _fd["pipe_r"]), ("eventfd", _fd["ev"]), ("socket", _keep["pair"][1].fileno()))
    )
    root = _keep["root"]
    with open(ROOT_FILE, "rb") as fresh:
        whole = fresh.read(200)
    out["root_file"] = [root.tell(), root.read(10) == whole[100:110]]
    out["dup_shares_offset"] = [os.lseek(_fd["dup"], 0, os.SEEK_CUR), os.read(_fd["dup"], 5) == whole[110:115], root.tell()]
    t = _keep["tmp"]
    out["tmp_file"] = [t.tell(), t.read(3)]
    _keep["log"].write("call;")
    _keep["log"].flush()
    with open("/tmp/log.txt") as lf:
        out["append"] = [lf.read(), bool(fcntl.fcntl(_keep["log"].fileno(), fcntl.F_GETFL) & os.O_APPEND)]
    out["dir"] = "lib" in os.listdir(_fd["dir"])
    out["devices"] = [
        os.write(_fd["null"], b"x"),
        os.read(_fd["zero"], 4) == b"\0\0\0\0",
        len(os.read(_fd["urandom"], 16)),
    ]
    r = _fd["pipe_r"]
    out["pipe"] = [os.read(r, 100).decode(), os.get_blocking(r), os.get_inheritable(r), os.get_inheritable(_fd["pipe_w"])]
    os.write(_fd["pipe_w"], b"again")
    out["pipe_again"] = os.read(r, 100).decode()
    out["pipe_reversed"] = os.read(_fd["rev_r"], 100).decode()
    got = b""
    while len(got) < BIG:
        got += os.read(_fd["big_r"], BIG)
    try:
        os.read(_fd["big_r"], 1)
        more = True
    except BlockingIOError:
        more = False
    out["pipe_64k"] = [len(got), got == _pattern(BIG), more]
    sem = []
    while True:
        try:
            sem.append(os.eventfd_read(_fd["ev_sem"]))
        except BlockingIOError:
            break
    out["eventfd"] = [sem, os.eventfd_read(_fd["ev"])]
    left = _remaining(_fd["timer_far"])
    out["timer_far"] = 3500 < left <= 3600
    ticks = 0
    for _ in range(100):
        ready, _, _ = select.select([_fd["timer_tick"]], [], [], 0.05)
        if ready:
            ticks = struct.unpack("Q", os.read(_fd["timer_tick"], 8))[0]
            break
    out["timer_ticks"] = ticks >= 1
    os.kill(os.getpid(), signal.SIGUSR2)
    info = os.read(_fd["sig"], 128)
    out["signalfd"] = struct.unpack_from("I", info)[0]
    m = _fd["memfd"]
    out["memfd"] = [os.lseek(m, 0, os.SEEK_CUR), os.read(m, 100).decode(), fcntl.fcntl(m, fcntl.F_GET_SEALS)]
    try:
        os.ftruncate(m, 1)
        out["memfd_sealed"] = False
    except PermissionError:
        out["memfd_sealed"] = True
    a, b = _keep["pair"]
    out["socketpair"] = [b.recv(100).decode(), a.recv(100).decode()]
    a.send(b"ping")
    out["socketpair_again"] = b.recv(100).decode()
    srv = _keep["listen"]
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(b"\0thaw-test-fds")
    conn, _ = srv.accept()
    c.send(b"hello")
    out["listen"] = [conn.recv(100).decode(), srv.getsockname().decode("latin-1")]
    conn.close()
    c.close()
    d = _keep["dgram"]
    out["dgram"] = [d.family, d.type]
    return out
