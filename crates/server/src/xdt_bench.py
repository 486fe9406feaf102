"""`thaw bench xdt`: a producer hands objects to a consumer, each transfer
timed in the producer from before it hands the bytes over until the consumer
has answered having touched every page of what it got."""
import base64
import time

import thaw


def pattern(size):
    block = bytes(range(256)) * 4096
    whole, rest = divmod(size, len(block))
    return block * whole + block[:rest]


def source(event):
    size, method, runs = event["size"], event["method"], event["runs"]
    data = pattern(size)
    times = []
    for _ in range(runs + 1):  # the first run warms the consumer up
        t0 = time.perf_counter()
        if method == "xdt":
            out = thaw.invoke("xdt-sink", {"ref": thaw.put(data)})
        elif method == "inline":
            out = thaw.invoke("xdt-sink", {"data": base64.b64encode(data).decode()})
        else:
            raise ValueError("unknown method %r" % method)
        times.append((time.perf_counter() - t0) * 1e3)
        if out["n"] != size:
            raise RuntimeError("the consumer got %d bytes, not %d" % (out["n"], size))
    return {"ms": times[1:]}


def sink(event):
    if "ref" in event:
        view = thaw.get(event["ref"])
    else:
        view = memoryview(base64.b64decode(event["data"]))
    return {"n": len(view), "touched": sum(view[::4096]) if len(view) else 0}
