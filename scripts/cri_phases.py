#!/usr/bin/env python3
"""Where a pod's start goes, from the containerd log that
`thaw bench cri --containerd-log FILE` writes (containerd at debug level).

    python3 scripts/cri_phases.py FILE

For every function and runtime of the comparison (each one's first pod, the
warm-up, left out): the median and min, ms, of RunPodSandbox and its steps
(containerd's work until CNI, the CNI plugins, the shim's start: from the
CNI result until the shim listens, then the pause container's task Create
and Start until the call returns), CreateContainer (containerd alone: no
runtime is called), and StartContainer (until the task is created: the
stdio FIFOs, the bundle, `shim start` and the runtime's Create; the task's
Start; containerd's bookkeeping after it). The density part's pods (32 at
once) are left out.
"""
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(r'^time="[0-9-]+T(\d+):(\d+):([0-9.]+)Z" level=\w+ msg="(.*)')
RUNP = re.compile(r'RunPodSandbox for &PodSandboxMetadata\{Name:(p\d+)-(runc|thaw),')
IMAGE = re.compile(r'Image:&ImageSpec\{Image:thaw\.local/([a-z0-9-]+?)(?:-runc)?:bench')


def events(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                t = int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])
                out.append((t, m[4]))
    return out


def pods(evs):
    """(name, runtime, events from its RunPodSandbox to its StopPodSandbox)."""
    i = 0
    while i < len(evs):
        m = RUNP.match(evs[i][1])
        if m and "returns" not in evs[i][1]:
            j = i
            while j < len(evs) and "StopPodSandbox for" not in evs[j][1]:
                j += 1
            yield m[1], m[2], evs[i:j]
            i = j
        i += 1


def first(seg, pattern, after=None):
    for t, msg in seg:
        if (after is None or t >= after) and pattern in msg:
            return t
    return None


def ms(a, b):
    return (b - a) * 1e3 if a is not None and b is not None else None


def phases(runtime, seg):
    t0 = seg[0][0]
    runp_end = first(seg, "returns sandbox id")
    cni0 = first(seg, "begin cni setup")
    cni1 = first(seg, "cni result")
    # the thaw shim's server, or runc's shim, ready
    ready = "server listen started" if runtime == "thaw" else "starting signal loop"
    shim_up = first(seg, ready, cni1)
    c0 = first(seg, "CreateContainer within sandbox")
    c1 = first(seg, "returns container id")
    s0 = first(seg, "StartContainer for")
    s1 = first(seg, "returns successfully", s0)
    created = first(seg, "topic=/tasks/create", s0)
    started = first(seg, "topic=/tasks/start", s0)
    return {
        "RunPodSandbox": ms(t0, runp_end),
        "  containerd until CNI": ms(t0, cni0),
        "  CNI": ms(cni0, cni1),
        "  shim start (after CNI until it listens)": ms(cni1, shim_up),
        "  pause task Create + Start": ms(shim_up, runp_end),
        "CreateContainer (containerd only)": ms(c0, c1),
        "StartContainer": ms(s0, s1),
        "  until the task is created": ms(s0, created),
        "  task Start": ms(created, started),
        "  after it": ms(started, s1),
    }


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cri_phases.py CONTAINERD_LOG")
    table = defaultdict(lambda: defaultdict(list))
    seen = set()
    for name, runtime, seg in pods(events(sys.argv[1])):
        if sum(1 for _, msg in seg if RUNP.match(msg) and "returns" not in msg) > 1:
            continue  # started beside others: the density part
        image = next((IMAGE.search(msg) for _, msg in seg if IMAGE.search(msg)), None)
        if image is None:
            continue
        key = (image[1], runtime)
        if key not in seen:  # the warm-up pod
            seen.add(key)
            continue
        for k, v in phases(runtime, seg).items():
            if v is not None:
                table[key][k].append(v)
    if not table:
        sys.exit("no comparison pods in the log (was it written at debug level?)")
    for (function, runtime), rows in sorted(table.items()):
        n = len(rows["RunPodSandbox"])
        print(f"{function} {runtime} ({n} pods): median / min ms")
        for k, v in rows.items():
            print(f"  {k:44s} {statistics.median(v):7.1f} / {min(v):6.1f}")


if __name__ == "__main__":
    main()
