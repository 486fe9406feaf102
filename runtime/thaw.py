"""thaw: call other functions and pass data by reference, from inside a thaw function.

    import thaw

    out = thaw.invoke("resize", {"w": 64})          # another function of the same owner
    h = thaw.invoke_async("score", event)           # runs while this one goes on
    ...; out = h.result()

    ref = thaw.put(data, retrievals=2)              # bytes-like -> an opaque reference (str)
    view = thaw.get(ref)                            # read-only memoryview of the object

Every call goes over the sandbox's control channel to the worker (the sandbox has no
network). `put` writes the bytes once into a memfd (made by the worker, mapped here) that the worker seals and keeps until
the object has been retrieved `retrievals` times or `ttl_s` passes; `get` maps the
same pages read-only into this sandbox, so nothing is copied between functions.
References can be passed in any event or return value; they can be neither read nor
forged. Failures raise ThawError with a `kind`: bad_reference, expired, exhausted,
gone, forbidden, too_large, over_budget, bad_object, limit, not_found, timeout,
invoke_failed (the callee failed: its error kind in `callee_error`), bad_request,
unavailable (outside an invocation).
"""

import mmap
import os

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
    if isinstance(data, str):
        raise TypeError("thaw.put takes bytes-like data, not str (encode it first)")
    view = memoryview(data).cast("B")
    # the worker makes the memfd: the sandbox's file-size limit (for its
    # logs) does not bound writes through a mapping
    _, fd = _request({"sdk": "alloc", "size": len(view)})
    try:
        if len(view):
            m = mmap.mmap(fd, len(view), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[:] = view
            m.close()
        reply, _ = _request({"sdk": "put", "retrievals": retrievals, "ttl_s": ttl_s}, fd)
    finally:
        os.close(fd)
    return reply["ref"]


def get(ref):
    """The object behind a reference, as a read-only memoryview (mapped, not copied)."""
    if not isinstance(ref, str):
        raise TypeError("thaw.get takes a reference string")
    reply, fd = _request({"sdk": "get", "ref": ref})
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
