# boto3's own time per Invoke against http.client's: a canned Lambda answer
# from a stub in this process, timed at the client and at the stub (request
# arrival, answer sent). Run with the lambda-clients venv's python:
#   boto3-own-time.py PAUSE_S RUNS
import http.client
import http.server
import statistics
import sys
import threading
import time

import boto3
import botocore.config

marks = {}


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        marks["arrive"] = time.perf_counter()
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b'"hello"'
        self.send_response(200)
        for k, v in (("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                     ("X-Amz-Executed-Version", "$LATEST"), ("x-amzn-RequestId", "abc")):
            self.send_header(k, v)
        self._headers_buffer += [b"\r\n", body]
        marks["sent"] = time.perf_counter()
        self.flush_headers()

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
threading.Thread(target=srv.serve_forever, daemon=True).start()
port = srv.server_address[1]
lam = boto3.client("lambda", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                   aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="x" * 40,
                   config=botocore.config.Config(retries={"max_attempts": 0}))
conn = http.client.HTTPConnection("127.0.0.1", port)


def via_boto3():
    lam.invoke(FunctionName="hello", Payload=b"{}")["Payload"].read()


def via_http():
    conn.request("POST", "/v1/functions/hello/invoke", body=b"{}",
                 headers={"Content-Type": "application/json"})
    conn.getresponse().read()


def own_time(call, pause, n):
    """Medians of the client's time before its request arrives and after
    the answer is sent, ms."""
    pre, post = [], []
    for _ in range(n):
        time.sleep(pause)
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        pre.append((marks["arrive"] - t0) * 1e3)
        post.append((t1 - marks["sent"]) * 1e3)
    return statistics.median(pre), statistics.median(post)


for name, call in (("boto3", via_boto3), ("http.client", via_http)):
    own_time(call, 0, 20)
    print(name, "warm (no pause): before send %.3f ms, after answer %.3f ms" % own_time(call, 0, 200))
    print(name, "after idle: before send %.3f ms, after answer %.3f ms"
          % own_time(call, float(sys.argv[1]), int(sys.argv[2])))
