"""TEST ONLY: the seccomp filter refuses mknod, so a function cannot make a
FIFO; the test makes /tmp/fifo from outside, then {"open": true} opens both
ends by its path and leaves bytes unread; later calls read what is there."""
import os

_fd = {}


def handler(event):
    if event.get("open"):
        _fd["r"] = os.open("/tmp/fifo", os.O_RDONLY | os.O_NONBLOCK)
        _fd["w"] = os.open("/tmp/fifo", os.O_WRONLY)
        os.write(_fd["w"], b"fifo-data")
        return {"opened": True}
    got = os.read(_fd["r"], 100).decode()
    os.write(_fd["w"], b"more")
    return {"read": got, "again": os.read(_fd["r"], 100).decode(), "mode": oct(os.stat("/tmp/fifo").st_mode)}
