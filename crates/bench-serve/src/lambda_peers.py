"""`thaw bench lambda`'s peer: AWS's Runtime Interface Emulator (RIE) beside
thaw, the same functions, the same client (boto3 1.40.20) and this one
process, alternating:

* python: one hello world, on thaw as python3.12 (thaw's agent) and as
  provided.al2023 whose bootstrap runs Lambda's runtime client
  (awslambdaric), on RIE through awslambdaric (as Lambda's base images run it);
* go, rust: the aws-lambda-go and lambda_runtime hello worlds as `bootstrap`,
  on thaw as provided.al2023 and on RIE directly.

cold: every run, after a pause longer than the daemon's keep-alive, each
thaw function's invoke (a restore, checked) and, for each RIE function, a
new RIE process (already listening) and its first invoke: the runtime's
process start, its init and the answer, as RIE does them on a first invoke.
warm: one live instance of each, invoked in turn through boto3 and through
plain HTTP (http.client: thaw's own API, RIE's invoke path).

    lambda_peers.py RUNS WARM_CALLS

Environment: THAW_ENDPOINT and AWS_* (the daemon's key), RIE (the
emulator), AWSLAMBDARIC (its package tree), GO_BOOTSTRAP, RUST_BOOTSTRAP.
Prints one JSON line.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

import boto3
import botocore.config

# written beside this script: crates/server/tests/lambda/function_zip.py,
# and the bench's own client (its Server-Timing parser)
from function_zip import RIC_BOOTSTRAP, tree, zipped
from lambda_bench import server_timing

ENDPOINT = os.environ["THAW_ENDPOINT"]
RIE = os.environ["RIE"]
RIC = os.environ["AWSLAMBDARIC"]
PYTHON_SOURCE = """
def lambda_handler(event, context):
    return {"message": "Hello, %s!" % event.get("name", "world")}
"""
RIE_INVOKE = "/2015-03-31/functions/function/invocations"
# longer than the daemon's keep-alive (1 s) plus its policy tick (0.5 s)
IDLE_GONE_S = 1.7


def fail(what):
    sys.exit("lambda_peers: " + what)


def python_ok(out, name):
    return out == {"message": "Hello, %s!" % name}


def bootstrap_ok(out, name):
    return isinstance(out, dict) and out.get("hello") == name


def read(path):
    with open(path, "rb") as f:
        return f.read()


def thaw_functions():
    """name -> (Runtime, Handler, zip, answer check, RIE peer)"""
    py = {"lambda_function.py": (PYTHON_SOURCE.encode(), 0o644)}
    ric = dict(tree(RIC), **py, bootstrap=(RIC_BOOTSTRAP, 0o755))
    go = {"bootstrap": (read(os.environ["GO_BOOTSTRAP"]), 0o755)}
    rust = {"bootstrap": (read(os.environ["RUST_BOOTSTRAP"]), 0o755)}
    handler = "lambda_function.lambda_handler"
    return {
        "python": ("python3.12", handler, zipped(py), python_ok, "python"),
        "python-awslambdaric": ("provided.al2023", handler, zipped(ric), python_ok, "python"),
        "go": ("provided.al2023", "bootstrap", zipped(go), bootstrap_ok, "go"),
        "rust": ("provided.al2023", "bootstrap", zipped(rust), bootstrap_ok, "rust"),
    }


def rie_functions():
    """name -> (command after RIE's flags, extra environment, answer check)"""
    return {
        "python": (["/usr/bin/python3", "-m", "awslambdaric", "lambda_function.lambda_handler"],
                   {"PYTHONPATH": RIC}, python_ok),
        "go": ([os.environ["GO_BOOTSTRAP"]], {}, bootstrap_ok),
        "rust": ([os.environ["RUST_BOOTSTRAP"]], {}, bootstrap_ok),
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rie:
    """One RIE process on loopback, listening; `log` holds what it printed."""

    def __init__(self, name, command, env, task):
        self.port = free_port()
        self.log = open(os.path.join(task, "rie-%s.log" % name), "w+")
        args = [RIE, "--runtime-interface-emulator-address", "127.0.0.1:%d" % self.port,
                "--runtime-api-address", "127.0.0.1:%d" % free_port()] + command
        environ = {"PATH": "/usr/bin:/bin", "AWS_LAMBDA_FUNCTION_NAME": name, **env}
        # a session of its own, so that stop() ends the runtime it starts too
        self.proc = subprocess.Popen(args, cwd=task, env=environ, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    printed = self.tail()
                    self.stop()
                    fail("RIE for %s did not listen: %s" % (name, printed))
                time.sleep(0.001)
        self.endpoint = "http://127.0.0.1:%d" % self.port

    def tail(self):
        self.log.seek(0)
        return self.log.read()[-2000:]

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


def lambda_client(endpoint, starts=None, timings=None):
    cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=60)
    lam = boto3.client("lambda", endpoint_url=endpoint, config=cfg)

    def seen(http_response, **kw):
        starts.append(http_response.headers.get("thaw-start-type"))
        timings.append(server_timing(http_response.headers.get("server-timing", "")))
    if starts is not None:
        lam.meta.events.register("after-call.lambda.Invoke", seen)
    return lam



def boto_invoke(lam, function, check, name):
    r = lam.invoke(FunctionName=function, Payload=json.dumps({"name": name}).encode())
    out = json.loads(r["Payload"].read())
    if "FunctionError" in r or not check(out, name):
        fail("%s answered %r" % (function, out))


def http_invoke(conn, path, check, name):
    conn.request("POST", path, body=json.dumps({"name": name}).encode(),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    if r.status != 200 or not check(out, name):
        fail("%s answered %s %r" % (path, r.status, out))
    return r.getheader("thaw-start-type")


def timed(f, *a):
    t = time.perf_counter()
    out = f(*a)
    return (time.perf_counter() - t) * 1e3, out


def expect_start(starts, want, what):
    if starts[-1] != want:
        fail("%s started %s, not %s" % (what, starts[-1], want))


def rie_invoke(peer, rie, task):
    """A new RIE process, listening, and its first invoke, timed."""
    command, env, check = rie[peer]
    r = Rie(peer, command, env, task)
    try:
        ms, _ = timed(boto_invoke, lambda_client(r.endpoint), "function", check, "bench")
    finally:
        r.stop()
    return ms


def cold(runs, thaw, rie, task, lam, starts, timings, out):
    for _ in range(runs):
        time.sleep(IDLE_GONE_S)
        for name, (_, _, _, check, peer) in thaw.items():
            ms, _ = timed(boto_invoke, lam, name, check, "bench")
            expect_start(starts, "restore", "thaw's %s" % name)
            t = out["thaw"][name]
            t["cold_ms"].append(ms)
            # the daemon's own view: the restore, and restore to answer
            phases = timings[-1]
            if "restore" not in phases or "total" not in phases:
                fail("thaw's %s answered no Server-Timing restore phase: %r" % (name, phases))
            t["daemon_restore_ms"].append(phases["restore"])
            t["daemon_answer_ms"].append(
                phases["restore"] + phases.get("after_restore", 0) + phases.get("exec", 0))
            t["daemon_total_ms"].append(phases["total"])
            t["daemon_queue_ms"].append(phases.get("queue", 0))
            # each RIE function once a run, after the first thaw function it serves
            if len(out["rie"][peer]["cold_ms"]) < len(out["thaw"][name]["cold_ms"]):
                out["rie"][peer]["cold_ms"].append(rie_invoke(peer, rie, task))


def warm(calls, thaw, rie, task, lam, starts, out):
    """Each RIE function's live process beside thaw's live instances of the
    functions it serves, invoked in turn."""
    host = urllib.parse.urlsplit(ENDPOINT)
    for peer, (command, env, rcheck) in rie.items():
        conn = http.client.HTTPConnection(host.hostname, host.port)
        mine = {n: f[3] for n, f in thaw.items() if f[4] == peer}
        r = Rie(peer, command, env, task)
        try:
            rlam = lambda_client(r.endpoint)
            rconn = http.client.HTTPConnection("127.0.0.1", r.port)
            boto_invoke(rlam, "function", rcheck, "warm-up")
            for name, check in mine.items():
                boto_invoke(lam, name, check, "warm-up")
            p = out["rie"][peer]
            for _ in range(calls):
                for name, check in mine.items():
                    t = out["thaw"][name]
                    ms, _ = timed(boto_invoke, lam, name, check, "warm")
                    expect_start(starts, "warm", "thaw's %s" % name)
                    t["warm_boto_ms"].append(ms)
                    path = "/v1/functions/%s/invoke" % name
                    ms, start = timed(http_invoke, conn, path, check, "warm")
                    if start != "warm":
                        fail("thaw's %s over HTTP started %s" % (name, start))
                    t["warm_http_ms"].append(ms)
                ms, _ = timed(boto_invoke, rlam, "function", rcheck, "warm")
                p["warm_boto_ms"].append(ms)
                ms, _ = timed(http_invoke, rconn, RIE_INVOKE, rcheck, "warm")
                p["warm_http_ms"].append(ms)
        finally:
            r.stop()


def main(runs, calls):
    task = tempfile.mkdtemp(prefix="thaw-rie-")
    try:
        with open(os.path.join(task, "lambda_function.py"), "w") as f:
            f.write(PYTHON_SOURCE)
        starts, timings = [], []
        lam = lambda_client(ENDPOINT, starts, timings)
        thaw = thaw_functions()
        for name, (runtime, handler, code, _, _) in thaw.items():
            lam.create_function(FunctionName=name, Runtime=runtime, Role="bench", Handler=handler,
                                Code={"ZipFile": code}, Timeout=30, MemorySize=256)
        rie = rie_functions()
        series = lambda: {"cold_ms": [], "warm_boto_ms": [], "warm_http_ms": []}
        daemon = lambda: dict(series(), daemon_restore_ms=[], daemon_answer_ms=[],
                              daemon_total_ms=[], daemon_queue_ms=[])
        out = {"thaw": {n: daemon() for n in thaw}, "rie": {n: series() for n in rie}}
        cold(runs, thaw, rie, task, lam, starts, timings, out)
        warm(calls, thaw, rie, task, lam, starts, out)
        return out
    finally:
        shutil.rmtree(task, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
