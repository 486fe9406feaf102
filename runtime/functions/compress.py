"""compress: zlib (deflate) compression of a text file (FunctionBench
`gzip_compression`, TOSS `compress`, PASS "Compression")."""
import hashlib
import zlib


def handler(event):
    with open(event["path"], "rb") as f:
        data = f.read()
    level = int(event.get("level", 6))
    packed = zlib.compress(data, level)
    ok = zlib.decompress(packed) == data
    return {
        "input_bytes": len(data),
        "input_crc32": zlib.crc32(data),
        "compressed_bytes": len(packed),
        "compressed_sha256": hashlib.sha256(packed).hexdigest(),
        "ratio": len(data) / max(1, len(packed)),
        "roundtrip_ok": ok,
    }
