#!/usr/bin/env python3
"""Keeps a node's labels saying which function images it holds snapshots of.

    snapshot-labels.py --node NAME --thaw-socket SOCKET --kubectl KUBECTL
                       [--kubeconfig FILE] [--every SECONDS]

Every SECONDS (2) it asks the node's thaw daemon for its functions
(GET /v1/functions on SOCKET) and reads which image each was deployed from
(the shim records it beside the socket, in function-images/), and sets the
node's labels

    snapshot.thaw.dev/IMAGE=warm     an instance of it is live or idle
    snapshot.thaw.dev/IMAGE=TIER     its snapshot is on that tier (tmpfs, disk,
                                     remote, ...: the daemon's snapshot_tier)

removing those of images the node no longer holds. IMAGE is the image
reference with every character other than a letter, digit, '-', '_' or '.'
replaced by '_' (thaw.local/hello:latest: thaw.local_hello_latest); a
reference that gives more than 63 characters, or one not beginning and
ending with a letter or digit, is img- and the first 24 hex digits of its
SHA-256. A Deployment prefers the nodes holding its image with a preferred
node affinity on the key (hello-deployment.yaml).

cluster.sh runs one per node with the node's own kubeconfig (a node may
change its own Node object). A daemon or API server that does not answer is
reported on stderr and asked again at the next round; bad arguments exit 2.
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

PREFIX = "snapshot.thaw.dev/"
NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
FUNCTION = re.compile(r"^img-[0-9a-f]{24}$")


def label_name(image):
    """The label's name part for an image reference."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", image)
    if NAME.match(name):
        return name
    return "img-" + hashlib.sha256(image.encode()).hexdigest()[:24]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def functions(sock):
    """The daemon's functions (GET /v1/functions)."""
    c = UnixConnection(sock, 10)
    try:
        c.request("GET", "/v1/functions")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET /v1/functions: {r.status} {body[:200]!r}")
        return json.loads(body)["functions"]
    finally:
        c.close()


def images_of(sock, function):
    """The image references the shim recorded for a function."""
    if not FUNCTION.match(function):
        return []
    path = os.path.join(os.path.dirname(sock), "function-images", function)
    try:
        with open(path) as f:
            return [l.strip() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def rank(where):
    """Warm beats a tier, a local tier the remote one (one image, several functions)."""
    return {"warm": 0, "remote": 2}.get(where, 1)


def wanted(sock):
    """The labels the node should have: {key: value}."""
    out = {}
    for f in functions(sock):
        instances = f.get("instances") or {}
        if (instances.get("live") or 0) + (instances.get("idle") or 0) > 0:
            where = "warm"
        else:
            where = f.get("snapshot_tier")
        if not isinstance(where, str) or not NAME.match(where):
            continue
        for image in images_of(sock, f.get("name", "")):
            key = PREFIX + label_name(image)
            if key not in out or rank(where) < rank(out[key]):
                out[key] = where
    return out


def kubectl(args, a):
    cmd = [args.kubectl] + (["--kubeconfig", args.kubeconfig] if args.kubeconfig else []) + a
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(a)}: {r.stderr.strip()}")
    return r.stdout


def sync(args):
    want = wanted(args.thaw_socket)
    node = json.loads(kubectl(args, ["get", "node", args.node, "-o", "json"]))
    have = {
        k: v for k, v in (node["metadata"].get("labels") or {}).items() if k.startswith(PREFIX)
    }
    change = [f"{k}={v}" for k, v in sorted(want.items()) if have.get(k) != v]
    change += [f"{k}-" for k in sorted(have) if k not in want]
    if change:
        kubectl(args, ["label", "node", args.node, "--overwrite"] + change)
        print(f"snapshot-labels: {args.node}: {' '.join(change)}", file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--node", required=True)
    p.add_argument("--thaw-socket", required=True)
    p.add_argument("--kubectl", required=True)
    p.add_argument("--kubeconfig")
    p.add_argument("--every", type=float, default=2.0)
    args = p.parse_args()
    if not 0.1 <= args.every <= 3600:
        p.error("--every must be between 0.1 and 3600 seconds")
    if not os.access(args.kubectl, os.X_OK):
        p.error(f"no kubectl at {args.kubectl}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    last_error = None
    while True:
        try:
            sync(args)
            last_error = None
        except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            # said once until it changes: the next round asks again
            if str(e) != last_error:
                print(f"snapshot-labels: {args.node}: {e}", file=sys.stderr, flush=True)
                last_error = str(e)
        time.sleep(args.every)


if __name__ == "__main__":
    main()
