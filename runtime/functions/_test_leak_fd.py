"""TEST ONLY: keeps descriptors a snapshot cannot keep open after returning
(an inotify instance, a deleted file of /tmp), so a checkpoint must refuse
them by name."""
import ctypes
import os

_held = {}


def handler(event):
    if not _held:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        _held["inotify"] = fd
        f = open("/tmp/gone.txt", "w+")
        os.unlink("/tmp/gone.txt")
        _held["deleted"] = f
    return {"open": len(_held)}
