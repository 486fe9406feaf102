"""`thaw bench xdt`: objects handed between functions three ways, side by side.

method "xdt": by reference (thaw.put / thaw.get: a sealed memfd mapped into the consumer);
"inline": base64 in the invocation event (up to the event limit); "store": through the
object store (thaw.store_put / thaw.store_get: an S3 PUT / GET the worker makes, to the
emulated MinIO). Transfers are timed in the function that starts them, from before the
bytes are handed over until every consumer has touched every page of what it got.
"""
import base64
import os
import pickle
import random
import struct
import time
import zlib

import thaw


def pattern(size):
    block = bytes(range(256)) * 4096
    whole, rest = divmod(size, len(block))
    return block * whole + block[:rest]


def send(method, data, key, consumers=1):
    """The event field that carries data to `consumers` consumers."""
    if method == "xdt":
        return {"ref": thaw.put(data, retrievals=consumers)}
    if method == "store":
        thaw.store_put(key, data)
        return {"key": key}
    if method == "inline":
        return {"data": base64.b64encode(data).decode()}
    raise ValueError("unknown method %r" % method)


def receive(event):
    """The bytes an event carries (see send), as a buffer."""
    if "ref" in event:
        return thaw.get(event["ref"])
    if "key" in event:
        return thaw.store_get(event["key"])
    return memoryview(base64.b64decode(event["data"]))


def touch(view):
    return sum(view[::4096]) if len(view) else 0


def ms_since(t0):
    return (time.perf_counter() - t0) * 1e3


def lap(stages, name, t0):
    """Adds the ms since t0 to stages[name]; returns now (the next lap's start)."""
    t = time.perf_counter()
    stages[name] = stages.get(name, 0.0) + (t - t0) * 1e3
    return t


# ---- 1-1 transfers


def source(event):
    size, method, runs = event["size"], event["method"], event["runs"]
    data = pattern(size)
    times = []
    for _ in range(runs + 1):  # the first run warms the consumer up
        t0 = time.perf_counter()
        out = thaw.invoke("xdt-sink", send(method, data, "bench/one/%d" % size))
        times.append(ms_since(t0))
        if out["n"] != size:
            raise RuntimeError("the consumer got %d bytes, not %d" % (out["n"], size))
    return {"ms": times[1:]}


def sink(event):
    t0 = time.perf_counter()
    # an event without data: the invocation's own round trip (see phases)
    view = receive(event) if event else memoryview(b"")
    t1 = time.perf_counter()
    touched = touch(view)
    return {"n": len(view), "touched": touched, "get_ms": (t1 - t0) * 1e3, "touch_ms": ms_since(t1)}


def phases(event):
    """Where a 1-1 by-reference transfer's time goes, one row per run: the
    producer's alloc round trip, its copy into the mapped memfd, the put round
    trip (seal + reference), the consumer invocation (of which the consumer's
    get and touch, timed there), and an invocation of the same consumer with no
    data (its fixed cost)."""
    size, runs = event["size"], event["runs"]
    view = memoryview(pattern(size))
    rows = []
    for _ in range(runs + 1):  # the first run warms the consumer up
        t0 = time.perf_counter()
        _, fd = thaw._request({"sdk": "alloc", "size": size})
        t1 = time.perf_counter()
        thaw._write(fd, view)
        t2 = time.perf_counter()
        reply, _ = thaw._request({"sdk": "put", "retrievals": 1, "ttl_s": None}, fd)
        os.close(fd)
        t3 = time.perf_counter()
        out = thaw.invoke("xdt-sink", {"ref": reply["ref"]})
        t4 = time.perf_counter()
        thaw.invoke("xdt-sink", {})
        t5 = time.perf_counter()
        if out["n"] != size:
            raise RuntimeError("the consumer got %d bytes, not %d" % (out["n"], size))
        rows.append({
            "alloc": (t1 - t0) * 1e3,
            "copy": (t2 - t1) * 1e3,
            "put": (t3 - t2) * 1e3,
            "invoke": (t4 - t3) * 1e3,
            "get": out["get_ms"],
            "touch": out["touch_ms"],
            "invoke_empty": (t5 - t4) * 1e3,
            "total": (t4 - t0) * 1e3,
        })
    return {"rows": rows[1:]}


# ---- across workers: the bench invokes producer (worker A), then consumer (worker B)

_DATA = {}


def put_only(event):
    """Puts `count` objects (1 unless given) and returns their references
    (`ref`: the first) and the puts' own time."""
    size = event["size"]
    if size not in _DATA:
        _DATA.clear()
        _DATA[size] = pattern(size)
    t0 = time.perf_counter()
    refs = [
        thaw.put(_DATA[size], retrievals=event.get("retrievals", 1))
        for _ in range(event.get("count", 1))
    ]
    return {"ref": refs[0], "refs": refs, "put_ms": ms_since(t0)}


def sink_all(event):
    """Gets and touches every object of `refs`; `n` is their total size."""
    n = 0
    for r in event["refs"]:
        view = thaw.get(r)
        touch(view)
        n += len(view)
    return {"n": n}


# ---- patterns: one timed round per invocation


def wait_all(handles, size):
    for h in handles:
        n = h.result()["n"]
        if n != size:
            raise RuntimeError("a consumer got %d bytes, not %d" % (n, size))


def scatter(event):
    """One producer, `degree` consumers, a distinct object each."""
    size, method, degree = event["size"], event["method"], event["degree"]
    data = pattern(size)
    t0 = time.perf_counter()
    hs = [
        thaw.invoke_async("xdt-psink", send(method, data, "bench/scatter/%d" % i))
        for i in range(degree)
    ]
    wait_all(hs, size)
    return {"ms": ms_since(t0)}


def broadcast(event):
    """One producer, `degree` consumers, the same object for all."""
    size, method, degree = event["size"], event["method"], event["degree"]
    data = pattern(size)
    t0 = time.perf_counter()
    ev = send(method, data, "bench/broadcast", consumers=degree)
    hs = [thaw.invoke_async("xdt-psink", ev) for _ in range(degree)]
    wait_all(hs, size)
    return {"ms": ms_since(t0)}


def gather(event):
    """`degree` producers, one consumer that takes every object."""
    size, method, degree = event["size"], event["method"], event["degree"]
    t0 = time.perf_counter()
    hs = [
        thaw.invoke_async("xdt-part", {"size": size, "method": method, "i": i})
        for i in range(degree)
    ]
    for h in hs:
        view = receive(h.result())
        if len(view) != size:
            raise RuntimeError("a part had %d bytes, not %d" % (len(view), size))
        touch(view)
    return {"ms": ms_since(t0)}


def part(event):
    return send(event["method"], pattern(event["size"]), "bench/gather/%d" % event["i"])


# ---- application 1: MapReduce word count


def corpus(mb, seed):
    rnd = random.Random(seed)
    vocab = ["w%x" % rnd.getrandbits(24) for _ in range(20000)]
    # Zipf-like: a few words are very common
    weights = [1.0 / (r + 1) for r in range(len(vocab))]
    words, size = [], 0
    while size < mb * 1_000_000:
        chunk = rnd.choices(vocab, weights, k=100_000)
        words.extend(chunk)
        size += sum(len(w) + 1 for w in chunk)
    return " ".join(words).encode(), len(words)


def split_at_spaces(data, n):
    cuts, start = [], 0
    for i in range(1, n):
        c = data.find(b" ", max(start, len(data) * i // n))
        cuts.append((start, c))
        start = c + 1
    cuts.append((start, len(data)))
    return [data[a:b] for a, b in cuts]


def wc_driver(event):
    method, mappers, reducers = event["method"], event["mappers"], event["reducers"]
    data, nwords = corpus(event["mb"], event.get("seed", 1))
    st = {}
    t0 = t = time.perf_counter()
    hs = []
    for i, chunk in enumerate(split_at_spaces(data, mappers)):
        ev = send(method, chunk, "wc/in/%d" % i)
        t = lap(st, "send inputs", t)
        hs.append(thaw.invoke_async("wc-map", dict(ev, i=i, reducers=reducers, method=method, sent=time.time())))
        t = lap(st, "start maps", t)
    maps = [h.result() for h in hs]
    t = lap(st, "wait maps", t)
    hs = [
        thaw.invoke_async("wc-reduce", {"parts": [m["parts"][r] for m in maps], "sent": time.time()})
        for r in range(reducers)
    ]
    reds = [h.result() for h in hs]
    lap(st, "reduce", t)
    e2e = ms_since(t0)
    total = sum(r["total"] for r in reds)
    if total != nwords:
        raise RuntimeError("counted %d words, the corpus has %d" % (total, nwords))
    return {
        "e2e_ms": e2e,
        "fn_ms": {"wc-map": [m["ms"] for m in maps], "wc-reduce": [r["ms"] for r in reds]},
        "stages": stages(st, {"wc-map": maps, "wc-reduce": reds}),
        "bytes": len(data) + sum(m["out_bytes"] for m in maps),
        # objects handed over (each read once): PUT and GET requests through a store
        "puts": mappers + mappers * reducers,
        "gets": mappers + mappers * reducers,
        "words": total,
        "distinct": sum(r["distinct"] for r in reds),
    }


def wc_map(event):
    st = dispatched(event)
    t0 = time.perf_counter()
    view = receive(event)
    t = lap(st, "get", t0)
    counts = {}
    for w in bytes(view).split():
        counts[w] = counts.get(w, 0) + 1
    parts = [{} for _ in range(event["reducers"])]
    for w, c in counts.items():
        parts[zlib.crc32(w) % len(parts)][w] = c
    blobs = [pickle.dumps(p, protocol=5) for p in parts]
    t = lap(st, "count", t)
    out = [send(event["method"], b, "wc/mid/%d/%d" % (event["i"], r)) for r, b in enumerate(blobs)]
    lap(st, "send", t)
    return {
        "parts": out,
        "out_bytes": sum(map(len, blobs)),
        "ms": ms_since(t0),
        "stages": list(st.items()),  # a JSON object would lose the order
    }


def wc_reduce(event):
    st = dispatched(event)
    t0 = time.perf_counter()
    total = {}
    for p in event["parts"]:
        t = time.perf_counter()
        view = receive(p)
        t = lap(st, "get", t)
        for w, c in pickle.loads(view).items():
            total[w] = total.get(w, 0) + c
        lap(st, "merge", t)
    return {
        "total": sum(total.values()),
        "distinct": len(total),
        "ms": ms_since(t0),
        "stages": list(st.items()),  # a JSON object would lose the order
    }


# ---- application 2: stacking-ensemble training


def pack(obj):
    """obj pickled with its arrays out of band, laid out so that unpack can
    use them where they lie: a u32 count, the u64 sizes of the pickle and of
    each buffer, then each of those at a 64-byte-aligned offset."""
    bufs = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    parts = [memoryview(head)] + [b.raw() for b in bufs]
    out = [struct.pack("<I%dQ" % len(parts), len(parts), *(p.nbytes for p in parts))]
    at = len(out[0])
    for p in parts:
        out += [bytes(-at % 64), p]
        at += -at % 64 + p.nbytes
    return b"".join(out)


def unpack(view):
    """The object pack made, its arrays read-only views of `view` (a mapped
    object: no copy; they keep it mapped)."""
    (n,) = struct.unpack_from("<I", view)
    at, parts = 4 + 8 * n, []
    for size in struct.unpack_from("<%dQ" % n, view, 4):
        at += -at % 64
        parts.append(view[at : at + size])
        at += size
    return pickle.loads(parts[0], buffers=parts[1:])


BASE_MODELS = ["logistic", "tree", "forest", "bayes"]


def make_model(name):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.tree import DecisionTreeClassifier

    return {
        "logistic": lambda: LogisticRegression(max_iter=300),
        "tree": lambda: DecisionTreeClassifier(max_depth=10, random_state=0),
        "forest": lambda: RandomForestClassifier(n_estimators=20, max_depth=10, random_state=0, n_jobs=1),
        "bayes": lambda: GaussianNB(),
    }[name]()


def ens_driver(event):
    import numpy as np
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    method, rows = event["method"], event["rows"]
    X, y = make_classification(
        n_samples=rows, n_features=event["features"], n_informative=12, random_state=0
    )
    a, b = rows * 6 // 10, rows * 8 // 10  # base train | meta train | test
    blob = pack((X, y, a, b))
    st = {}
    t0 = time.perf_counter()
    ev = send(method, blob, "ens/data", consumers=len(BASE_MODELS))
    t = lap(st, "send data", t0)
    hs = [
        thaw.invoke_async("ens-base", dict(ev, model=m, method=method, sent=time.time()))
        for m in BASE_MODELS
    ]
    t = lap(st, "start bases", t)
    bases = [h.result() for h in hs]
    t = lap(st, "wait bases", t)
    preds = [unpack(receive(r["preds"])) for r in bases]
    models_bytes = sum(len(receive(r["model"])) for r in bases)
    t = lap(st, "get results", t)
    meta_x = np.hstack(preds)
    meta = LogisticRegression(max_iter=300).fit(meta_x[: b - a], y[a:b])
    accuracy = float(meta.score(meta_x[b - a :], y[b:]))
    lap(st, "meta-model", t)
    e2e = ms_since(t0)
    return {
        "e2e_ms": e2e,
        "fn_ms": {"ens-base": [r["ms"] for r in bases]},
        "stages": stages(st, {"ens-base": bases}),
        "bytes": len(blob) + sum(r["out_bytes"] for r in bases),
        # the data set is read by every base model
        "puts": 1 + 2 * len(bases),
        "gets": 3 * len(bases),
        "accuracy": accuracy,
        "base_accuracy": {r["model_name"]: r["accuracy"] for r in bases},
        "models_bytes": models_bytes,
    }


def ens_base(event):
    st = dispatched(event)
    t0 = time.perf_counter()
    view = receive(event)
    t = lap(st, "get", t0)
    X, y, a, b = unpack(view)
    t = lap(st, "unpickle", t)
    m = make_model(event["model"]).fit(X[:a], y[:a])
    t = lap(st, "fit", t)
    preds = pack(m.predict_proba(X[a:]))
    model = pickle.dumps(m, protocol=5)
    accuracy = float(m.score(X[b:], y[b:]))
    t = lap(st, "predict", t)
    name = event["model"]
    out = {
        "model_name": name,
        "accuracy": accuracy,
        "preds": send(event["method"], preds, "ens/preds/%s" % name),
        # the trained model travels back too (a real pipeline keeps it)
        "model": send(event["method"], model, "ens/model/%s" % name),
        "out_bytes": len(preds) + len(model),
    }
    lap(st, "send", t)
    return dict(out, ms=ms_since(t0), stages=list(st.items()))


def dispatched(event):
    """A called function's first lap, "dispatch": from the caller's invoke
    (its wall clock in the event's "sent": sandboxes share that clock, not
    their monotonic ones) until the function runs."""
    return {"dispatch": max(0.0, (time.time() - event["sent"]) * 1e3)}


def stages(driver, called):
    """One run's stage times as [function, stage, ms] in the order they ran:
    the driver's own laps, then each called function's, of each lap the
    slowest invocation's (the one the driver waits for)."""
    out = [["driver", k, v] for k, v in driver.items()]
    for fn, results in called.items():
        per = {}
        for r in results:
            for k, v in r["stages"]:
                per[k] = max(per.get(k, 0.0), v)
        out.extend([fn, k, v] for k, v in per.items())
    return out
