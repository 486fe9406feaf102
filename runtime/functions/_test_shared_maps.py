"""TEST ONLY: shared mappings made at init, checked by the function itself. A
fresh instance and every restore of its snapshot must answer alike:

- a multiprocessing ThreadPool (its queues' locks are POSIX semaphores: a
  deleted /dev/shm/sem.* file mapped shared) that still computes;
- a multiprocessing Lock and Semaphore(2), still working, the semaphore's count
  as init left it;
- a /tmp file written at init and mapped shared twice: a write through one
  mapping (from another thread) is seen through the other and by a read of
  the file, and a write to the file is seen through the mappings;
- shared anonymous memory (MAP_SHARED | MAP_ANONYMOUS) holding what init wrote.

A clone's writes stay its own: the handler writes its `tag` into every
mapping, and a later restore must still see init's bytes."""
import mmap
import multiprocessing
import multiprocessing.pool
import os
import threading

POOL = multiprocessing.pool.ThreadPool(4)
LOCK = multiprocessing.Lock()
SEM = multiprocessing.Semaphore(2)
SEM.acquire()  # one left

with open("/tmp/cache.bin", "wb") as f:
    f.write(b"init" + bytes(8188))
_fd = os.open("/tmp/cache.bin", os.O_RDWR)
MAP_A = mmap.mmap(_fd, 8192, mmap.MAP_SHARED)
MAP_B = mmap.mmap(_fd, 8192, mmap.MAP_SHARED)
os.close(_fd)
MAP_A[100:105] = b"12345"

ANON = mmap.mmap(-1, 8192, mmap.MAP_SHARED)
ANON[:9] = b"anonymous"


def _square(x):
    return x * x


def handler(event):
    out = {}
    out["pool"] = sum(POOL.map(_square, range(100)))
    out["lock"] = LOCK.acquire(timeout=1)
    if out["lock"]:
        LOCK.release()
    out["sem_value"] = SEM.get_value()
    out["sem_acquire"] = SEM.acquire(timeout=1)
    if out["sem_acquire"]:
        SEM.release()
    # what init left, before this clone writes anything
    out["tmp_seen"] = [bytes(MAP_A[:4]).decode(), bytes(MAP_B[100:105]).decode()]
    out["anon_seen"] = bytes(ANON[:9]).decode()
    tag = str(event.get("tag", "x"))[:8].encode().ljust(8, b".")
    t = threading.Thread(target=lambda: MAP_A.__setitem__(slice(200, 208), tag))
    t.start()
    t.join()
    with open("/tmp/cache.bin", "rb") as f:
        f.seek(200)
        out["file_sees_map_write"] = f.read(8) == tag
    out["other_map_sees_write"] = bytes(MAP_B[200:208]) == tag
    with open("/tmp/cache.bin", "r+b") as f:
        f.seek(300)
        f.write(tag)
    out["map_sees_file_write"] = bytes(MAP_A[300:308]) == tag
    ANON[:9] = tag + b"!"
    out["ok"] = (
        out["pool"] == 328350
        and out["lock"]
        and out["sem_value"] == 1
        and out["sem_acquire"]
        and out["tmp_seen"] == ["init", "12345"]
        and out["anon_seen"] == "anonymous"
        and out["file_sees_map_write"]
        and out["other_map_sees_write"]
        and out["map_sees_file_write"]
    )
    return out
