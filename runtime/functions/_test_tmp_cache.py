"""TEST ONLY: init caches 50 MiB in /tmp, as functions cache models there; the
handler reads a page of it. Measures what a snapshot's /tmp costs a restore
(`thaw bench restore --functions _test_tmp_cache`)."""
import os

CACHE = "/tmp/cache.bin"
MIB = 1 << 20
SIZE_MIB = 50


def init():
    block = os.urandom(MIB)
    with open(CACHE, "wb") as f:
        for i in range(SIZE_MIB):
            f.write(bytes([i]) + block[1:])


def handler(event):
    with open(CACHE, "rb") as f:
        f.seek(7 * MIB)
        first = f.read(4096)[0]
    return {"bytes": os.path.getsize(CACHE), "block7": first}
