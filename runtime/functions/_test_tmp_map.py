"""TEST ONLY: maps a file on the sandbox's private /tmp and closes the
descriptor. That file does not exist outside this sandbox, so checkpoint must
refuse the snapshot and name the mapping. (ctypes mmap: Python's mmap module
would keep a duplicate descriptor open.)"""
import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]

with open("/tmp/scratch.bin", "wb") as f:
    f.write(b"x" * 8192)
_fd = os.open("/tmp/scratch.bin", os.O_RDONLY)
_addr = _libc.mmap(None, 8192, 1, 2, _fd, 0)  # PROT_READ, MAP_PRIVATE
os.close(_fd)
if _addr in (None, ctypes.c_void_p(-1).value):
    raise OSError(ctypes.get_errno(), "mmap of /tmp/scratch.bin failed")


def handler(event):
    return {"first": ctypes.string_at(_addr, 1).decode()}
