"""Functions for the XDT tests (crates/server/tests/xdt.rs): producers,
consumers, chains and hostile code, all through `import thaw`."""
import ctypes
import hashlib
import mmap
import os
import resource
import time

import thaw


def rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def pattern(size):
    block = bytes(range(256)) * 4096  # 1 MiB
    whole, rest = divmod(size, len(block))
    return block * whole + block[:rest]


def produce(event):
    data = pattern(event["size"])
    ref = thaw.put(data, retrievals=event.get("retrievals", 1), ttl_s=event.get("ttl_s"))
    return {"ref": ref, "sha256": hashlib.sha256(data).hexdigest()}


def consume(event):
    before = rss_kb()
    view = thaw.get(event["ref"])
    mapped = rss_kb()
    touch = event.get("touch_pages")
    if touch is None:
        digest = hashlib.sha256(view).hexdigest()
        touched = None
    else:
        step = max(1, len(view) // 4096 // max(touch, 1)) * 4096
        touched = sum(view[i] for i in range(0, min(len(view), step * touch), step))
        digest = None
    out = {"size": len(view), "sha256": digest, "touched": touched,
           "rss_before_kb": before, "rss_mapped_kb": mapped, "rss_after_kb": rss_kb()}
    # the mapping cannot be written through the view
    try:
        view[0] = 1
        out["write"] = "succeeded"
    except TypeError as e:
        out["write"] = "refused: %s" % e
    return out


def pipeline(event):
    """producer -> consumer, both invoked from here (sync and async)."""
    p = thaw.invoke("producer", {"size": event["size"]})
    h = thaw.invoke_async("consumer", {"ref": p["ref"], "touch_pages": event.get("touch_pages")})
    c = h.result()
    return {"producer": p, "consumer": c}


def fanout(event):
    """scatter: one object read by n consumers at once."""
    n = event["n"]
    ref = thaw.put(pattern(event["size"]), retrievals=n)
    handles = [thaw.invoke_async("consumer", {"ref": ref}) for _ in range(n)]
    return [h.result()["sha256"] for h in handles]


def recurse(event):
    depth = event.get("depth", 0)
    try:
        return thaw.invoke("recurse", {"depth": depth + 1})
    except thaw.ThawError as e:
        # the innermost call reports what stopped it; callers pass it up
        if e.kind == "invoke_failed":
            raise
        return {"deepest": depth, "kind": e.kind, "message": e.message}


def try_kind(fn):
    try:
        fn()
        return "ok"
    except thaw.ThawError as e:
        return e.kind


def hostile(event):
    """Every bad input the SDK or a hand-made frame can send; each must come
    back as a clear error while the invocation goes on."""
    out = {}
    good = thaw.put(b"x" * 5000, retrievals=1)
    # forged / truncated / not a reference / absurdly long
    body = good[len("thref1."):]
    flipped = "thref1." + ("A" if body[20] != "A" else "B").join([body[:20], body[21:]])
    out["forged"] = try_kind(lambda: thaw.get(flipped))
    out["truncated"] = try_kind(lambda: thaw.get(good[:-10]))
    out["garbage"] = try_kind(lambda: thaw.get("hello"))
    out["huge_ref"] = try_kind(lambda: thaw.get("thref1." + "A" * 100000))
    # replay past N
    out["first_get"] = try_kind(lambda: thaw.get(good))
    out["replayed"] = try_kind(lambda: thaw.get(good))
    # another owner's reference (given in the event)
    if event.get("foreign_ref"):
        out["foreign_ref"] = try_kind(lambda: thaw.get(event["foreign_ref"]))
    # calling another owner's function, and one that does not exist
    out["foreign_fn"] = try_kind(lambda: thaw.invoke("stranger", {}))
    out["missing_fn"] = try_kind(lambda: thaw.invoke("no-such-function", {}))
    # expired
    short = thaw.put(b"y", ttl_s=1)
    time.sleep(1.3)
    out["expired"] = try_kind(lambda: thaw.get(short))
    # bad put arguments
    out["zero_retrievals"] = try_kind(lambda: thaw.put(b"z", retrievals=0))
    # past the function's object budget (the daemon's test config: 128 MiB)
    hold = thaw.put(pattern(100 << 20), ttl_s=5)
    out["over_budget"] = try_kind(lambda: thaw.put(pattern(40 << 20)))
    thaw.get(hold).release()
    # a 10 GB object (sparse: it costs nothing to make) is refused
    out["put_10gb"] = try_kind(lambda: thaw._request({"sdk": "alloc", "size": 10 << 30}))
    # a pipe, or a memfd that cannot be sealed, is not an object
    r, w = os.pipe()
    out["put_pipe"] = try_kind(lambda: thaw._request({"sdk": "put"}, r))
    os.close(r)
    os.close(w)
    fd = os.memfd_create("nosealing")
    os.write(fd, b"abc")
    out["put_unsealable"] = try_kind(lambda: thaw._request({"sdk": "put"}, fd))
    os.close(fd)
    # a memfd still mapped writable cannot be sealed
    fd = os.memfd_create("mapped", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    m = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    out["put_mapped_writable"] = try_kind(lambda: thaw._request({"sdk": "put"}, fd))
    m.close()
    os.close(fd)
    # malformed requests
    out["unknown_op"] = try_kind(lambda: thaw._request({"sdk": "steal"}))
    out["get_without_ref"] = try_kind(lambda: thaw._request({"sdk": "get"}))
    out["fd_with_get"] = try_kind(lambda: thaw._request({"sdk": "get", "ref": good}, 0))
    out["wait_unknown"] = try_kind(lambda: thaw._request({"sdk": "wait", "handle": 99}))
    # writing to a retrieved object: through the descriptor, a writable
    # shared mapping, mprotect of the read-only mapping
    obj = thaw.put(b"w" * 8192, retrievals=1)
    reply, rfd = thaw._request({"sdk": "get", "ref": obj})
    try:
        os.write(rfd, b"!")
        out["write_fd"] = "succeeded"
    except OSError as e:
        out["write_fd"] = "refused: errno %d" % e.errno
    try:
        mmap.mmap(rfd, 8192, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        out["map_writable"] = "succeeded"
    except OSError as e:
        out["map_writable"] = "refused: errno %d" % e.errno
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    addr = libc.mmap(None, 8192, mmap.PROT_READ, mmap.MAP_SHARED, rfd, 0)
    os.close(rfd)
    if libc.mprotect(addr, 8192, mmap.PROT_READ | mmap.PROT_WRITE) == 0:
        out["mprotect_writable"] = "succeeded"
    else:
        out["mprotect_writable"] = "refused: errno %d" % ctypes.get_errno()
    out["map_read"] = ctypes.string_at(addr, 4).decode()
    return out


def half_put(event):
    """Killed mid-transfer: writes half an object into a memfd and hangs."""
    fd = os.memfd_create("half", os.MFD_ALLOW_SEALING)
    os.write(fd, b"h" * (1 << 20))
    while True:
        time.sleep(0.05)


def leave(event):
    """A producer whose consumer never reads: the object waits for its TTL."""
    return {"ref": thaw.put(b"l" * 100000, ttl_s=event.get("ttl_s", 2))}


def inline(event):
    return {"n": len(event["data"])}
