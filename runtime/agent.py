"""thaw in-sandbox agent: serves one function over the inherited socket at fd 3.

Protocol: docs/AGENT_PROTOCOL.md. Every message both ways is a 4-byte little-endian
length N followed by N bytes of UTF-8 JSON (an object). The agent never sends
anything unprompted, handles one request at a time on its main thread (a function may
start threads of its own: a snapshot captures them), and keeps no file descriptors open
between requests other than 0, 1, 2 and 3.

Usage (argv comes from thaw_runtime::RootInfo::agent_command; PYTHONPATH=/opt/thaw,
so that the byte-compiled module runs rather than this source compiled anew):
    python3 -P -m agent FUNCTION
    python3 -P -m agent --user      (a deployed function, see below)

A deployed (user) function's code is mounted read-only at /opt/thaw/user; the
environment names its handler (THAW_HANDLER=module.function) and its optional
hooks (THAW_INIT, THAW_BEFORE_SNAPSHOT, THAW_AFTER_RESTORE, same form). Its own
Debian packages, if it has any, are mounted read-only at /opt/thaw/packages.

A handler takes the event, or (Lambda's form) the event and a context
(LambdaContext below); which one is decided once, when it is loaded.
"""

import gc
import json
import os
import random
import resource
import signal
import struct
import sys
import time
import traceback

import thaw as thaw_sdk

AGENT_VERSION = 1
CTRL_FD = 3
THAW_DIR = os.path.dirname(os.path.abspath(__file__))
FUNCTIONS_DIR = os.path.join(THAW_DIR, "functions")
INPUTS_DIR = os.path.join(THAW_DIR, "inputs")
USER_DIR = os.path.join(THAW_DIR, "user")
# a deployed function's own Debian packages (mounted only when it has some)
PACKAGES_SITE = os.path.join(THAW_DIR, "packages/usr/lib/python3/dist-packages")
USER_FLAG = "--user"
SIZES = ("I", "II", "III", "IV")

MAX_REQUEST = int(os.environ.get("THAW_MAX_REQUEST", str(16 << 20)))
MAX_OUTPUT = int(os.environ.get("THAW_MAX_OUTPUT", str(1 << 20)))
DEFAULT_TIMEOUT_MS = float(os.environ.get("THAW_DEFAULT_TIMEOUT_MS", "60000"))
DISCARD_CHUNK = 1 << 20


def log(msg):
    try:
        sys.stderr.write("agent: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


class BadRequest(Exception):
    pass


class LambdaContext:
    """What Lambda's Python runtime hands a handler as its second argument.
    The fixed fields come from the environment the worker sets for a deployed
    function; the request id and the deadline are the invocation's."""

    def __init__(self, request_id, deadline, instance_id):
        env = os.environ
        name = env.get("THAW_FUNCTION_NAME", "")
        version = env.get("THAW_FUNCTION_VERSION", "$LATEST")
        owner = env.get("THAW_FUNCTION_OWNER", "default")
        self.aws_request_id = request_id
        self.function_name = name
        self.function_version = version
        # a string, as in Lambda's runtime
        self.memory_limit_in_mb = env.get("THAW_FUNCTION_MEMORY_MB", "")
        self.invoked_function_arn = "arn:thaw:lambda:local:%s:function:%s" % (owner, name)
        self.log_group_name = "/thaw/functions/%s" % name
        self.log_stream_name = "%s/[%s]%s" % (time.strftime("%Y/%m/%d", time.gmtime()), version, instance_id)
        self.identity = None
        self.client_context = None
        self._deadline = deadline

    def get_remaining_time_in_millis(self):
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def takes_context(fn):
    """Whether `fn` takes a second positional argument (Lambda's context): read
    from its code object once, at load (no `inspect`: its imports would sit in
    every snapshot)."""
    code = getattr(fn, "__code__", None)
    skip = 0
    if code is None and getattr(fn, "__func__", None) is not None:
        code, skip = fn.__func__.__code__, 1  # a bound method: self is given
    if code is None:
        call = getattr(type(fn), "__call__", None)
        code, skip = getattr(call, "__code__", None), 1
    if code is None:
        return False
    CO_VARARGS = 0x04
    return bool(code.co_flags & CO_VARARGS) or code.co_argcount - skip >= 2


def new_request_id():
    """A UUID4 in Lambda's text form, for invocations the worker did not name."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


class InvocationTimeout(BaseException):
    """Raised from the SIGALRM handler; a BaseException so that `except Exception`
    inside a function does not swallow it."""


def _on_alarm(signum, frame):
    raise InvocationTimeout()


def install_signal_handlers():
    # At start, before the function loads: whatever the function installs at
    # init replaces these, and a snapshot carries the dispositions as they
    # are then (a restore sets them again before the runtime runs).
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 0)


# ---------------------------------------------------------------- framing


def read_exact(n):
    """Read exactly n bytes from fd 3; None on EOF before the first byte."""
    chunks = []
    got = 0
    while got < n:
        b = os.read(CTRL_FD, min(n - got, DISCARD_CHUNK))
        if not b:
            if got == 0:
                return None
            raise EOFError("connection closed mid-message")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def discard(n):
    left = n
    while left > 0:
        b = os.read(CTRL_FD, min(left, DISCARD_CHUNK))
        if not b:
            raise EOFError("connection closed inside an oversized request")
        left -= len(b)


def send(obj):
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    msg = struct.pack("<I", len(data)) + data
    view = memoryview(msg)
    while view:
        n = os.write(CTRL_FD, view)
        view = view[n:]


def recv():
    """Returns (request_dict or None, error_message or None); raises EOFError on close."""
    head = read_exact(4)
    if head is None:
        raise EOFError("closed")
    if len(head) < 4:
        raise EOFError("short header")
    (n,) = struct.unpack("<I", head)
    if n > MAX_REQUEST:
        # The length is explicit, so the stream stays in sync: drop the body.
        discard(n)
        return None, "request of %d bytes exceeds the limit of %d bytes" % (n, MAX_REQUEST)
    body = read_exact(n) if n else b""
    if body is None:
        raise EOFError("closed")
    try:
        req = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, "request is not UTF-8 JSON: %s" % e
    if not isinstance(req, dict):
        return None, "request must be a JSON object"
    return req, None


def _ctrl_socket():
    # a socket object over fd 3 without a new descriptor; detach() before it goes.
    # `socket` is imported on first use, by the SDK only: every instance would
    # carry the module's memory otherwise
    import socket

    return socket.socket(fileno=CTRL_FD)


def recv_with_fd():
    """One frame from the worker and the descriptor passed with it (or None)."""
    import socket

    sock = _ctrl_socket()
    fds = []

    def read(n):
        parts = []
        while n > 0:
            data, anc, _, _ = sock.recvmsg(
                min(n, DISCARD_CHUNK), socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC
            )
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % 4
                    fds.extend(struct.unpack("<%di" % (usable // 4), payload[:usable]))
            if not data:
                raise EOFError("the worker closed the control socket")
            parts.append(data)
            n -= len(data)
        return b"".join(parts)

    try:
        (n,) = struct.unpack("<I", read(4))
        if n > MAX_REQUEST:
            raise EOFError("worker reply of %d bytes exceeds the limit" % n)
        body = read(n)
    finally:
        sock.detach()
        for extra in fds[1:]:
            os.close(extra)
    return json.loads(body.decode("utf-8")), (fds[0] if fds else None)


def sdk_call(msg, fd=None):
    """One request of the in-sandbox SDK (thaw.py) to the worker, during an
    invocation: (reply, descriptor or None). SIGALRM waits until the exchange is
    over, so a timeout never leaves half a frame on the channel."""
    import socket

    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
        frame = struct.pack("<I", len(data)) + data
        sent = 0
        if fd is not None:
            sock = _ctrl_socket()
            try:
                sent = sock.sendmsg(
                    [frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
                )
            finally:
                sock.detach()
        view = memoryview(frame)[sent:]
        while view:
            view = view[os.write(CTRL_FD, view) :]
        return recv_with_fd()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def bad(message):
    return {"ok": False, "error": "bad_request", "message": message}


# ---------------------------------------------------------------- state


class Agent:
    def __init__(self, function):
        self.function = function
        self.module = None
        self.handler = None
        self.handler_takes_context = False
        self.after_restore_hook = None
        self.before_snapshot_hook = None
        self.before_snapshot_ran = False
        # names this instance in Lambda's log_stream_name: the worker's id
        # after a restore, else one made on first use (never before a
        # snapshot, so clones never share it)
        self.instance_id = None
        self.invocations = 0
        self.load_info = None

    # -- load
    def load(self):
        if self.module is not None:
            return dict(self.load_info, already_loaded=True)
        if self.function == USER_FLAG:
            return self.load_user()
        if not self.function or self.function.startswith(".") or "/" in self.function:
            raise BadRequest("bad function name %r" % self.function)
        path = os.path.join(FUNCTIONS_DIR, self.function + ".py")
        if not os.path.isfile(path):
            raise BadRequest("unknown function %r" % self.function)
        t0 = time.perf_counter()
        module = import_function(self.function, path)
        t1 = time.perf_counter()
        init = getattr(module, "init", None)
        if init is not None:
            init()
        t2 = time.perf_counter()
        self.module = module
        self.handler = getattr(module, "handler")
        return self.finish_load(t0, t1, t2)

    def load_user(self):
        # The handler and hooks are named in the environment; the code is on
        # sys.path from the read-only mount, so it may be a package.
        handler_name = os.environ.get("THAW_HANDLER", "")
        if USER_DIR not in sys.path:
            sys.path.insert(0, USER_DIR)
        if os.path.isdir(PACKAGES_SITE) and PACKAGES_SITE not in sys.path:
            # after the root's own: the packages never replace what it has;
            # addsitedir also reads their .pth files (namespace packages)
            import site

            site.addsitedir(PACKAGES_SITE)
        t0 = time.perf_counter()
        handler = resolve_entry(handler_name, "handler")
        t1 = time.perf_counter()
        init_name = os.environ.get("THAW_INIT")
        if init_name:
            resolve_entry(init_name, "init")()
        t2 = time.perf_counter()
        hook_name = os.environ.get("THAW_AFTER_RESTORE")
        if hook_name:
            self.after_restore_hook = resolve_entry(hook_name, "after_restore")
        hook_name = os.environ.get("THAW_BEFORE_SNAPSHOT")
        if hook_name:
            self.before_snapshot_hook = resolve_entry(hook_name, "before_snapshot")
        self.module = sys.modules.get(handler_name.rpartition(".")[0])
        self.handler = handler
        return self.finish_load(t0, t1, t2)

    def finish_load(self, t0, t1, t2):
        self.handler_takes_context = takes_context(self.handler)
        gc.collect()
        self.load_info = {
            "ok": True,
            "op": "load",
            "function": self.function,
            "import_ms": (t1 - t0) * 1e3,
            "init_ms": (t2 - t1) * 1e3,
            "rss_kb": rss_kb(),
        }
        return self.load_info

    # -- invoke
    def invoke(self, req):
        if "input" in req and "size" in req:
            raise BadRequest("give either 'size' or 'input', not both")
        if "input" in req:
            event = req["input"]
        elif "size" in req:
            size = req["size"]
            if size not in SIZES:
                raise BadRequest("unknown input size %r (sizes: %s)" % (size, ", ".join(SIZES)))
            event = read_input(self.function, size)
        else:
            raise BadRequest("invoke needs 'size' or 'input'")
        timeout_ms = req.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if timeout_ms is not None and (
            isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms <= 0
        ):
            raise BadRequest("timeout_ms must be a positive number")
        request_id = req.get("request_id")
        if request_id is not None and not isinstance(request_id, str):
            raise BadRequest("request_id must be a string")
        if self.module is None:
            self.load()
        handler = self.handler
        self.invocations += 1
        t0 = time.perf_counter()
        args = (event,)
        if self.handler_takes_context:
            limit_s = (timeout_ms if timeout_ms is not None else DEFAULT_TIMEOUT_MS) / 1e3
            if self.instance_id is None:
                self.instance_id = os.urandom(16).hex()
            args = (event, LambdaContext(request_id or new_request_id(), time.monotonic() + limit_s, self.instance_id))
        # The timeout is our SIGALRM timer, unless the function took SIGALRM
        # for itself (signal.alarm, a library's timeout): then its timer is
        # left alone, and the worker's own deadline ends a late invocation.
        alarm = timeout_ms is not None and signal.getsignal(signal.SIGALRM) is _on_alarm
        try:
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, timeout_ms / 1e3)
            thaw_sdk._call = sdk_call
            try:
                output = handler(*args)
            finally:
                thaw_sdk._call = None
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except InvocationTimeout:
            return {
                "ok": False,
                "error": "timeout",
                "message": "invocation exceeded timeout_ms=%s" % timeout_ms,
                "exec_ms": (time.perf_counter() - t0) * 1e3,
            }
        except Exception as e:
            return dict(function_error(e), exec_ms=(time.perf_counter() - t0) * 1e3)
        exec_ms = (time.perf_counter() - t0) * 1e3
        try:
            encoded = json.dumps(output, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            return {"ok": False, "error": "bad_output", "message": "output is not JSON: %s" % e}
        if len(encoded) > MAX_OUTPUT:
            return {
                "ok": False,
                "error": "bad_output",
                "message": "output of %d bytes exceeds the cap of %d bytes" % (len(encoded), MAX_OUTPUT),
            }
        return {"ok": True, "output": output, "exec_ms": exec_ms}

    # -- health
    def health(self):
        return {
            "ok": True,
            "state": "ready" if self.module is not None else "idle",
            "function": self.function,
            "invocations": self.invocations,
            "pid": os.getpid(),
            "agent_version": AGENT_VERSION,
        }

    # -- checkpoint cooperation
    def prepare_checkpoint(self):
        if not self.before_snapshot_ran:
            # once per instance, however often a snapshot is asked for:
            # SnapStart's hooks (snapshot_restore_py), then thaw's own
            self.before_snapshot_ran = True
            try:
                run_snapstart_hooks("get_before_snapshot")
                if self.before_snapshot_hook is not None:
                    self.before_snapshot_hook()
            except Exception as e:
                return function_error(e, "before_snapshot hook: ")
        # loaded before the snapshot: a restore calls munmap first thing
        munmap_fn()
        gc.collect()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        # Descriptors and threads are the checkpoint's business: it captures
        # them from outside, or refuses by name what it cannot.
        return {"ok": True, "op": "prepare_checkpoint", "threads": python_threads()}

    def restored(self, req):
        seed = req.get("seed")
        if not isinstance(seed, str) or len(seed) != 64:
            raise BadRequest("restored needs 'seed': 64 hex characters")
        try:
            seed_bytes = bytes.fromhex(seed)
        except ValueError:
            raise BadRequest("seed is not hex")
        unmap = address_range(req, "unmap")
        if unmap is not None:
            # the restorer's trampoline: the last of it left in our memory
            check(munmap_fn()(*unmap), "munmap")
        self.instance_id = None
        reseeded = reseed_all(seed_bytes, self.module)
        return {"ok": True, "state": "restored", "reseeded": reseeded}

    def after_restore(self, req):
        instance_id = req.get("instance_id")
        if not isinstance(instance_id, str):
            raise BadRequest("after_restore needs 'instance_id': a string")
        self.instance_id = instance_id
        snapstart = "snapshot_restore_py" in sys.modules
        if self.after_restore_hook is None and not snapstart:
            return {"ok": True, "op": "after_restore", "hook": False, "hook_ms": 0.0}
        t0 = time.perf_counter()
        try:
            # thaw's own hook, then SnapStart's (snapshot_restore_py): the
            # reverse of the order before the snapshot
            if self.after_restore_hook is not None:
                self.after_restore_hook(instance_id)
            run_snapstart_hooks("get_after_restore")
        except Exception as e:
            return function_error(e, "after_restore hook: ")
        return {
            "ok": True,
            "op": "after_restore",
            "hook": True,
            "hook_ms": (time.perf_counter() - t0) * 1e3,
        }


def run_snapstart_hooks(getter):
    """Runs the hooks the function registered with SnapStart's
    snapshot_restore_py (if it imported it), in that module's order."""
    module = sys.modules.get("snapshot_restore_py")
    if module is None:
        return
    for func, args, kwargs in getattr(module, getter)():
        func(*args, **kwargs)


_LIBC = []


def libc():
    if not _LIBC:
        import ctypes

        c = ctypes.CDLL(None, use_errno=True)
        _LIBC.append(c)
    return _LIBC[0]


# ---------------------------------------------------------------- zygote

# A zygote template (`thaw bench restore --start-types zygote`) is the agent
# loaded once, as root and without the seccomp filter (it creates namespaces),
# which forks one child per cold start into fresh pid, mount, net, ipc and uts
# namespaces; the child sets itself up as a sandbox (its own cgroups, /tmp,
# loopback, limits, uid, seccomp filter) and serves the new socket it was handed.
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 2
MS_NODEV = 4
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1
ZYGOTE_FDS = 6  # socket, log, /dev/null, memory and pids cgroup.procs, the template's pid namespace


_MUNMAP = []


def munmap_fn():
    if not _MUNMAP:
        import ctypes

        f = libc().munmap
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        f.restype = ctypes.c_int
        _MUNMAP.append(f)
    return _MUNMAP[0]


def check(ret, what):
    if ret != 0:
        import ctypes

        raise OSError(ctypes.get_errno(), what)


def zygote_fork(agent, req, fds):
    """Forks a child into new namespaces; replies with its pid (in our namespace)."""
    import ctypes

    try:
        if len(fds) != ZYGOTE_FDS:
            raise BadRequest("zygote_fork needs %d descriptors, got %d" % (ZYGOTE_FDS, len(fds)))
        uid, tmp_bytes, rlimits, filt = req.get("uid"), req.get("tmp_bytes"), req.get("rlimits"), req.get("filter")
        shm_bytes = req.get("shm_bytes")
        if not (isinstance(uid, int) and uid > 0 and isinstance(tmp_bytes, int) and tmp_bytes > 0):
            raise BadRequest("zygote_fork needs 'uid' and 'tmp_bytes'")
        if not (isinstance(shm_bytes, int) and shm_bytes > 0):
            raise BadRequest("zygote_fork needs 'shm_bytes'")
        if not isinstance(rlimits, list) or not isinstance(filt, str):
            raise BadRequest("zygote_fork needs 'rlimits' and 'filter'")
        try:
            filt = bytes.fromhex(filt)
        except ValueError:
            raise BadRequest("zygote_fork: 'filter' is not hex")
    except BadRequest:
        for fd in fds:
            os.close(fd)
        raise
    while True:  # reap the children the worker has killed since
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    c = libc()
    own_pidns = fds[5]
    # the next child is pid 1 of a new pid namespace; ours stays put
    check(c.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    pid = os.fork()
    if pid == 0:
        try:
            zygote_child(agent, c, fds, uid, (tmp_bytes, shm_bytes), rlimits, filt)
        except BaseException as e:
            log("zygote child: %r" % (e,))
        os._exit(127)
    try:
        check(c.setns(own_pidns, CLONE_NEWPID), "setns back to our pid namespace")
    finally:
        for fd in fds:
            os.close(fd)
    return {"ok": True, "op": "zygote_fork", "pid": pid}


def zygote_child(agent, c, fds, uid, sizes, rlimits, filt):
    import ctypes
    import fcntl
    import socket

    sock, logfd, devnull, mem_procs, pids_procs, _ = fds
    for procs in (mem_procs, pids_procs):
        os.write(procs, b"0")  # join this sandbox's cgroups
    check(c.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    os.setsid()
    check(c.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    for src, dst in ((devnull, 0), (logfd, 1), (logfd, 2), (sock, CTRL_FD)):
        os.dup2(src, dst)
    os.closerange(CTRL_FD + 1, 1 << 16)
    # private /tmp and /dev/shm: the template's would be shared by every child
    for where, size in zip((b"/tmp", b"/dev/shm"), sizes):
        opts = b"size=%d,mode=1777" % size
        check(c.mount(b"tmpfs", where, b"tmpfs", MS_NOSUID | MS_NODEV, opts), "mounting %r" % where)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
    flags = struct.unpack("16sH22x", ifr)[1] | IFF_UP
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags))
    s.close()
    socket.sethostname("thaw")
    for res, val in rlimits:
        resource.setrlimit(res, (val, val))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    buf = ctypes.create_string_buffer(filt, len(filt))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(filt) // 8, ctypes.addressof(buf))
    check(c.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")
    # one byte first: the worker learns our pid from its credentials
    os.write(CTRL_FD, b"Z")
    install_signal_handlers()
    serve(agent)
    os._exit(0)


def serve_zygote(agent):
    """The template's loop: like serve, but requests may carry descriptors."""
    import array
    import socket

    sock = socket.socket(fileno=os.dup(CTRL_FD))
    while True:
        fds = array.array("i")
        try:
            head, anc, _, _ = sock.recvmsg(4, socket.CMSG_SPACE(ZYGOTE_FDS * fds.itemsize))
        except OSError:
            return
        if not head:
            return
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        if len(head) < 4:
            head += read_exact(4 - len(head)) or b""
        (n,) = struct.unpack("<I", head)
        body = read_exact(n) if n else b""
        try:
            req = json.loads(body.decode("utf-8"))
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except (UnicodeDecodeError, ValueError) as e:
            for fd in fds:
                os.close(fd)
            send(bad("request is not a JSON object: %s" % e))
            continue
        try:
            if req.get("op") == "zygote_fork":
                reply = zygote_fork(agent, req, list(fds))
            else:
                for fd in fds:
                    os.close(fd)
                reply = handle(agent, req)
        except BadRequest as e:
            reply = bad(str(e))
        except Exception as e:
            reply = function_error(e)
        send(reply)


def function_error(e, prefix=""):
    """The reply for an exception the function's code raised (call inside `except`).
    `stack_trace`: the function's own frames (Lambda's stackTrace)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__, limit=50) if f.filename != __file__]
    return {
        "ok": False,
        "error": "function_error",
        "message": "%s%s: %s" % (prefix, type(e).__name__, e),
        "error_type": type(e).__name__,
        "error_message": str(e),
        "traceback": traceback.format_exc(limit=20),
        "stack_trace": traceback.format_list(frames[-20:]),
    }


def resolve_entry(name, what):
    """`module.function` (module may be dotted) from the user code directory."""
    import importlib

    module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise BadRequest("%s %r is not of the form module.function" % (what, name))
    module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise BadRequest("%s %r: module %r has no function %r" % (what, name, module_name, attr))
    return fn


def import_function(name, path):
    # Imported under a private name: function files are named after the workloads
    # (pyaes, chameleon), which are also the names of the libraries they use.
    import importlib.util

    spec = importlib.util.spec_from_file_location("thaw_function_" + name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def read_input(function, size):
    path = os.path.join(INPUTS_DIR, function, size + ".json")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        if function.startswith("_test_"):
            return {}  # test-only functions have no inputs: every size is {}
        raise BadRequest("function %r has no input of size %s" % (function, size))


def rss_kb():
    # No /proc in the sandbox: peak resident set size from getrusage (kB on Linux).
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def python_threads():
    """The agent's Python threads other than its own: name and id."""
    threading = sys.modules.get("threading")
    if threading is None:
        return []
    me = threading.current_thread()
    return [{"name": t.name, "native_id": t.native_id or 0} for t in threading.enumerate() if t is not me]


def address_range(req, key):
    """req[key] as (address, length), None when absent."""
    value = req.get(key)
    if value is None:
        return None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, int) and 0 < x < 1 << 47 for x in value)
    ):
        raise BadRequest("%s needs [address, length]" % key)
    return value[0], value[1]


def reseed_all(seed, module):
    """Re-seed every generator a clone could share with its siblings."""
    done = []
    random.seed(seed)
    done.append("random")
    np = sys.modules.get("numpy")
    if np is not None:
        words = struct.unpack("<8I", seed)
        np.random.seed(list(words))
        done.append("numpy.random")
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        # tempfile's name generator is per-pid, and clones share pid 1.
        tempfile._name_sequence = None
        done.append("tempfile")
    hook = getattr(module, "reseed", None) if module is not None else None
    if hook is not None:
        hook(seed)
        done.append("function")
    return done


# ---------------------------------------------------------------- loop


def handle(agent, req):
    op = req.get("op")
    if not isinstance(op, str):
        raise BadRequest("missing 'op'")
    if op == "load":
        return agent.load()
    if op == "invoke":
        return agent.invoke(req)
    if op == "health":
        return agent.health()
    if op == "prepare_checkpoint":
        return agent.prepare_checkpoint()
    if op == "restored":
        return agent.restored(req)
    if op == "after_restore":
        return agent.after_restore(req)
    if op == "exit":
        send({"ok": True, "op": "exit"})
        sys.exit(0)
    raise BadRequest("unknown op %r" % op)


def serve(agent):
    while True:
        try:
            req, err = recv()
        except EOFError:
            return
        if err is not None:
            send(bad(err))
            continue
        try:
            reply = handle(agent, req)
        except BadRequest as e:
            reply = bad(str(e))
        except InvocationTimeout:
            # A late alarm (timer fired just after the handler returned).
            reply = {"ok": False, "error": "timeout", "message": "late timeout"}
        except Exception as e:
            # e.g. an import error in load: report it, keep serving.
            reply = function_error(e)
        try:
            send(reply)
        except BrokenPipeError:
            return


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python3 -m agent FUNCTION\n")
        return 2
    try:
        os.fstat(CTRL_FD)
    except OSError:
        sys.stderr.write("agent: fd %d (control socket) is not open\n" % CTRL_FD)
        return 2
    install_signal_handlers()
    if os.environ.get("THAW_ZYGOTE") == "1":
        libc()  # the children use it: loaded once, here
        serve_zygote(Agent(argv[1]))
    else:
        serve(Agent(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
