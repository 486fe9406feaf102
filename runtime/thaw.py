"""thaw: call other functions and pass data by reference, from inside a thaw function.

    import thaw

    out = thaw.invoke("resize", {"w": 64})          # another function of the same owner
    h = thaw.invoke_async("score", event)           # runs while this one goes on
    ...; out = h.result()

    ref = thaw.put(data, retrievals=2)              # bytes-like -> an opaque reference (str)
    view = thaw.get(ref)                            # read-only memoryview of the object

    thaw.store_put("runs/7/part-0", data)           # the object-store baseline: an S3 PUT
    view = thaw.store_get("runs/7/part-0")          # ... and GET (read-only memoryview)

Every call goes over the sandbox's control channel to the worker (the sandbox has no
network). `put` writes the bytes once into a memfd (made by the worker) that the worker seals and keeps until
the object has been retrieved `retrievals` times or `ttl_s` passes; `get` maps the
same pages read-only into this sandbox, so nothing is copied between functions.
References can be passed in any event or return value; they can be neither read nor
forged. Failures raise ThawError with a `kind`: bad_reference, expired, exhausted,
gone, forbidden, too_large, over_budget, bad_object, limit, not_found, timeout,
invoke_failed (the callee failed: its error kind in `callee_error`), bad_request,
unavailable (outside an invocation, or no object store configured), store_failed (the
object store refused or did not answer).

store_put / store_get are the baseline XDT is measured against: the worker makes a plain
S3 PUT / GET on the function's behalf (the sandbox has no network), to the home's remote
tier (emulated: MinIO in a network namespace). Keys are the owner's.
"""

import mmap
import os
import resource

# Set by the agent for the length of one invocation: fn(msg, fd) -> (reply, fd).
_call = None

WRITE_CHUNK = 1 << 24


class ThawError(Exception):
    def __init__(self, kind, message, callee_error=None):
        Exception.__init__(self, "%s: %s" % (kind, message))
        self.kind = kind
        self.message = message
        self.callee_error = callee_error


def _request(msg, fd=None):
    call = _call
    if call is None:
        raise ThawError("unavailable", "the thaw SDK works only while a thaw function is invoked")
    reply, rfd = call(msg, fd)
    if not reply.get("ok"):
        if rfd is not None:
            os.close(rfd)
        raise ThawError(
            str(reply.get("error")), str(reply.get("message")), reply.get("callee_error")
        )
    return reply, rfd


def put(data, retrievals=1, ttl_s=None):
    """Stores a bytes-like object with the worker; returns its reference."""
    # the worker makes the memfd: the sandbox's file-size limit (for its
    # logs) does not bound writes through a mapping
    fd = _fill(_bytes_view(data, "thaw.put"))
    try:
        reply, _ = _request({"sdk": "put", "retrievals": retrievals, "ttl_s": ttl_s}, fd)
    finally:
        os.close(fd)
    return reply["ref"]


def _fill(view):
    """A worker-made memfd holding the bytes of view; the caller closes it."""
    _, fd = _request({"sdk": "alloc", "size": len(view)})
    try:
        _write(fd, view)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(fd, view):
    """Writes view at the start of the memfd fd (sized to it)."""
    n = len(view)
    # pwrite fills fresh pages about 3x faster than faulting them in through
    # a mapping one by one, but RLIMIT_FSIZE (the sandbox's log cap) bounds
    # it: what lies past the cap goes through a mapping
    head = min(n, _write_limit())
    done = 0
    while done < head:
        wrote = os.pwrite(fd, view[done:head], done)
        if wrote <= 0:
            raise ThawError("internal", "the object's memfd took no bytes")
        done += wrote
    if head < n:
        m = mmap.mmap(fd, n, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        m[head:] = view[head:]
        m.close()


def _write_limit():
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return 1 << 62 if soft == resource.RLIM_INFINITY else soft


def _bytes_view(data, what):
    if isinstance(data, str):
        raise TypeError("%s takes bytes-like data, not str (encode it first)" % what)
    return memoryview(data).cast("B")


def _mapped(reply, fd):
    """The read-only object a reply's descriptor carries, as a memoryview."""
    if fd is None:
        raise ThawError("internal", "the worker sent no descriptor with the object")
    try:
        size = reply["size"]
        if os.fstat(fd).st_size != size:
            raise ThawError("internal", "object size mismatch")
        if size == 0:
            return memoryview(b"")
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return memoryview(m)


def store_put(key, data):
    """Stores bytes-like data as `key` in the object store (an S3 PUT by the worker)."""
    if not isinstance(key, str):
        raise TypeError("thaw.store_put takes a key string")
    fd = _fill(_bytes_view(data, "thaw.store_put"))
    try:
        reply, _ = _request({"sdk": "store_put", "key": key}, fd)
    finally:
        os.close(fd)
    return reply["size"]


def store_get(key):
    """The object stored as `key` (an S3 GET by the worker), as a read-only memoryview."""
    if not isinstance(key, str):
        raise TypeError("thaw.store_get takes a key string")
    return _mapped(*_request({"sdk": "store_get", "key": key}))


def get(ref):
    """The object behind a reference, as a read-only memoryview (mapped, not copied)."""
    if not isinstance(ref, str):
        raise TypeError("thaw.get takes a reference string")
    return _mapped(*_request({"sdk": "get", "ref": ref}))


def invoke(function, event=None):
    """Invokes another function of the same owner and returns its output."""
    reply, _ = _request({"sdk": "invoke", "function": function, "event": event, "wait": True})
    return reply.get("output")


class Handle:
    """An invocation running on its own; `result()` waits for its output."""

    def __init__(self, function, handle):
        self.function = function
        self._handle = handle
        self._done = False
        self._output = None

    def result(self):
        if not self._done:
            reply, _ = _request({"sdk": "wait", "handle": self._handle})
            self._output = reply.get("output")
            self._done = True
        return self._output


def invoke_async(function, event=None):
    """Starts another function of the same owner; returns a Handle."""
    reply, _ = _request({"sdk": "invoke", "function": function, "event": event, "wait": False})
    return Handle(function, reply["handle"])
