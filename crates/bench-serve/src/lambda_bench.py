"""`thaw bench lambda`'s client side: one Python hello world created through
Lambda's API with boto3, then invoked through boto3 and through thaw's own
API (`POST /v1/functions/NAME/invoke` with http.client) from this one
process, alternating, so both pay the same client costs but boto3's.

    lambda_bench.py cold RUNS   # every invoke a restore (the daemon keeps an idle instance 1 s)
    lambda_bench.py warm SECONDS THREADS

Environment: THAW_ENDPOINT and AWS_* (the daemon's key). Prints one JSON
line.
"""
import http.client
import io
import json
import os
import sys
import threading
import time
import urllib.parse
import zipfile

import boto3
import botocore.config

ENDPOINT = os.environ["THAW_ENDPOINT"]
HOST = urllib.parse.urlsplit(ENDPOINT)
NAME = "hello"
SOURCE = """
def lambda_handler(event, context):
    return {"message": "Hello, %s!" % event.get("name", "world")}
"""
PAYLOAD = json.dumps({"name": "bench"}).encode()
WANT = {"message": "Hello, bench!"}


def client():
    cfg = botocore.config.Config(retries={"max_attempts": 1}, max_pool_connections=4)
    lam = boto3.client("lambda", endpoint_url=ENDPOINT, config=cfg)
    starts, totals = [], []

    def seen(http_response, **kw):
        starts.append(http_response.headers.get("thaw-start-type"))
        totals.append(daemon_total(http_response.headers.get("server-timing", "")))
    lam.meta.events.register("after-call.lambda.Invoke", seen)
    return lam, starts, totals


def server_timing(header):
    """`Server-Timing: a;dur=1.5, b;dur=2` -> {"a": 1.5, "b": 2.0}"""
    phases = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            phases[name] = float(dur)
    return phases


def daemon_total(header):
    """The `total` phase of a Server-Timing header: the request inside the daemon, ms."""
    return server_timing(header)["total"]


def create(lam):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("lambda_function.py", SOURCE)
    lam.create_function(FunctionName=NAME, Runtime="python3.12", Role="bench",
                        Handler="lambda_function.lambda_handler", Code={"ZipFile": buf.getvalue()},
                        Timeout=30, MemorySize=128)


def via_lambda(lam):
    r = lam.invoke(FunctionName=NAME, Payload=PAYLOAD)
    out = json.loads(r["Payload"].read())
    if out != WANT or "FunctionError" in r:
        sys.exit("Lambda invoke answered %r" % out)


def native_conn():
    return http.client.HTTPConnection(HOST.hostname, HOST.port)


def via_native(conn):
    conn.request("POST", "/v1/functions/%s/invoke" % NAME, body=PAYLOAD,
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200 or json.loads(body) != WANT:
        sys.exit("native invoke answered %s %r" % (r.status, body))
    return r.getheader("thaw-start-type"), daemon_total(r.getheader("server-timing", ""))


def timed(f, *a):
    t = time.perf_counter()
    out = f(*a)
    return (time.perf_counter() - t) * 1e3, out


# longer than the daemon's keep-alive (1 s) plus its policy tick (0.5 s)
IDLE_GONE_S = 1.7


def cold(runs):
    lam, starts, totals = client()
    create(lam)
    conn = native_conn()
    native, boto, native_daemon = [], [], []
    for _ in range(runs):
        time.sleep(IDLE_GONE_S)
        ms, (start, total) = timed(via_native, conn)
        if start != "restore":
            sys.exit("a native invoke started %s, not from the snapshot" % start)
        native.append(ms)
        native_daemon.append(total)
        time.sleep(IDLE_GONE_S)
        ms, _ = timed(via_lambda, lam)
        if starts[-1] != "restore":
            sys.exit("a Lambda invoke started %s, not from the snapshot" % starts[-1])
        boto.append(ms)
    return {"native_ms": native, "lambda_ms": boto,
            "native_daemon_ms": native_daemon, "lambda_daemon_ms": totals[-runs:]}


def hammer(seconds, threads, make, call):
    """`threads` threads calling `call(make())` until `seconds` are over:
    requests per second and each request's latency."""
    lat, lock, stop = [], threading.Lock(), time.perf_counter() + seconds
    barrier = threading.Barrier(threads + 1)

    def run():
        c = make()
        mine = []
        barrier.wait()
        while time.perf_counter() < stop:
            ms, _ = timed(call, c)
            mine.append(ms)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return len(lat) / (time.perf_counter() - t0), lat


def warm(seconds, threads):
    lam, _, _ = client()
    create(lam)
    for _ in range(threads):  # instances up before the clock starts
        via_lambda(lam)
    out = {}
    # alternating halves: drift in the machine's load hits both
    for round_ in range(2):
        for name, make, call in (("native", native_conn, via_native),
                                 ("lambda", lambda: client()[0], via_lambda)):
            rps, lat = hammer(seconds / 2, threads, make, call)
            out.setdefault(name + "_rps", []).append(rps)
            out.setdefault(name + "_ms", []).extend(lat)
    return out


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cold":
        print(json.dumps(cold(int(sys.argv[2]))))
    else:
        print(json.dumps(warm(float(sys.argv[2]), int(sys.argv[3]))))
