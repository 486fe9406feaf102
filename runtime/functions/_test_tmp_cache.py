"""TEST ONLY: init caches 50 MiB in /tmp (five 10 MiB shards: a sandbox's
files stop at 16 MiB), as functions cache models there; the handler reads a
page of one shard. Measures what a snapshot's /tmp costs a restore
(`thaw bench restore --functions _test_tmp_cache`)."""
import os

MIB = 1 << 20
SHARDS = 5
SHARD_MIB = 10


def shard(i):
    return "/tmp/cache-%d.bin" % i


def init():
    block = os.urandom(MIB)
    for i in range(SHARDS):
        with open(shard(i), "wb") as f:
            for j in range(SHARD_MIB):
                f.write(bytes([j]) + block[1:])


def handler(event):
    with open(shard(3), "rb") as f:
        f.seek(7 * MIB)
        first = f.read(4096)[0]
    total = sum(os.path.getsize(shard(i)) for i in range(SHARDS))
    return {"bytes": total, "block7": first}
