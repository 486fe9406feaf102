"""Trusted checkers of the function suite's outputs.

    python3 /opt/thaw/check.py FUNCTION SIZE  < output.json

Exit 0 and print "ok" if the output is right; otherwise exit 1 with a line
"CHECK FAILED: ..." on stderr saying what is wrong. Each checker recomputes the
answer (or checkable facts about it) from the input, by an independent route where
one exists (numpy rot90 vs Pillow's transpose, a numpy power iteration vs networkx,
an HTML parser vs the template engine, the generator's own objects vs the JSON
round trip, the sentiment lexicon vs the learned model), so a wrong or merely
non-empty output fails.
"""

import hashlib
import json
import math
import os
import sys

import thawgen

BASE = os.path.dirname(os.path.abspath(__file__))


class CheckError(Exception):
    pass


def expect(cond, msg, *args):
    if not cond:
        raise CheckError(msg % args if args else msg)


def close(a, b, rel=1e-9, abs_=0.0):
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)


def field(out, name, kind=None):
    expect(isinstance(out, dict), "output is not a JSON object")
    expect(name in out, "output has no field %r", name)
    v = out[name]
    if kind is not None:
        if kind is float:
            expect(isinstance(v, (int, float)) and not isinstance(v, bool), "%s is not a number", name)
        else:
            expect(isinstance(v, kind) and not (kind is int and isinstance(v, bool)), "%s is not %s", name, kind.__name__)
    return v


# ---------------------------------------------------------------- per function


def check_helloworld(event, exp, out):
    msg = field(out, "message", str)
    expect(msg == exp["message"], "message is %r, expected %r", msg[:80], exp["message"][:80])
    expect(field(out, "length", int) == len(event["name"]), "wrong length")


def check_idle_threads(event, exp, out):
    check_helloworld(event, exp, out)
    expect(field(out, "threads", int) == exp["threads"], "%s threads, expected %s", out["threads"], exp["threads"])


check_idle_threads_1 = check_idle_threads_8 = check_idle_threads


def check_node_helloworld(event, exp, out, name="node_helloworld"):
    check_helloworld(event, exp, out)
    expect(field(out, "function", str) == name, "the context's function name is %r", out.get("function"))


def check_java_hello(event, exp, out):
    check_node_helloworld(event, exp, out, "java_hello")


def _pyaes_kat():
    import pyaes

    # FIPS-197 appendix C.3 (AES-256).
    key = bytes(range(32))
    pt = bytes.fromhex("00112233445566778899aabbccddeeff")
    ct = bytes(pyaes.AES(key).encrypt(list(pt)))
    expect(ct.hex() == "8ea2b7ca516745bfeafc49904b496089", "pyaes fails the FIPS-197 known answer")


def check_pyaes(event, exp, out):
    import pyaes

    _pyaes_kat()
    msg = event["message"].encode("utf-8")
    ct = pyaes.AESModeOfOperationCTR(bytes.fromhex(event["key_hex"])).encrypt(msg)
    expect(field(out, "length", int) == exp["length"] == len(ct), "wrong ciphertext length")
    expect(field(out, "ciphertext_head_hex", str) == ct[:32].hex(), "ciphertext head differs")
    expect(field(out, "ciphertext_sha256", str) == hashlib.sha256(ct).hexdigest(), "ciphertext digest differs")
    expect(field(out, "roundtrip_ok") is True, "decryption did not give back the message")


CHAMELEON_TEMPLATE = (
    '<table xmlns:tal="http://xml.zope.org/namespaces/tal">'
    '<tr tal:repeat="row rows">'
    '<td tal:repeat="cell row" tal:content="cell">x</td>'
    "</tr>"
    "</table>"
)


def chameleon_cell(r, c, cols):
    return "%d&%d<%d>" % (r, c, r * cols + c)


def check_chameleon(event, exp, out):
    from html.parser import HTMLParser

    from chameleon import PageTemplate

    rows, cols = exp["rows"], exp["cols"]
    data = [[chameleon_cell(r, c, cols) for c in range(cols)] for r in range(rows)]
    html = PageTemplate(CHAMELEON_TEMPLATE)(rows=data)

    # Independent check of the reference rendering: parse it back.
    class Grid(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag == "td":
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "td":
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, d):
            if self.cell is not None:
                self.cell += d

    p = Grid()
    p.feed(html)
    expect(p.rows == data, "reference rendering does not parse back to the table")
    expect(field(out, "tr", int) == rows, "tr count %s, expected %d", out.get("tr"), rows)
    expect(field(out, "td", int) == rows * cols, "td count %s, expected %d", out.get("td"), rows * cols)
    expect(field(out, "html_length", int) == len(html), "html length %s, expected %d", out.get("html_length"), len(html))
    expect(field(out, "html_sha256", str) == hashlib.sha256(html.encode()).hexdigest(), "html digest differs")
    expect(field(out, "head", str) == html[:200], "html head differs")
    probes = field(out, "probes", list)
    expect(len(probes) == len(event["probes"]), "wrong number of probes")
    for (r, c), got in zip(event["probes"], probes):
        expect(got == [r, c, chameleon_cell(r, c, cols)], "cell (%d,%d) is %r", r, c, got)


def check_json_serdes(event, exp, out):
    for k in ("input_bytes", "records", "output_bytes", "output_sha256"):
        expect(field(out, k) == exp[k], "%s is %r, expected %r", k, out.get(k), exp[k])
    expect(close(field(out, "grand_total", float), exp["grand_total"], rel=1e-9, abs_=0.01), "grand_total differs")
    expect(field(out, "roundtrip_ok") is True, "serialised document did not parse back equal")


def check_image_rotate(event, exp, out):
    import numpy as np
    from PIL import Image

    with Image.open(event["path"]) as im:
        src = np.asarray(im.convert("RGB"))
    h, w = src.shape[:2]
    expect(field(out, "input_size", list) == [w, h] == exp["input_size"], "input size wrong")
    expect(field(out, "output_size", list) == [h, w] == exp["output_size"], "output size %r, expected %r", out.get("output_size"), [h, w])
    # Counter-clockwise quarter turn by index arithmetic (numpy), not Pillow.
    rot = np.ascontiguousarray(np.rot90(src, 1))
    expect(field(out, "pixels_sha256", str) == hashlib.sha256(rot.tobytes()).hexdigest(), "rotated pixels differ")
    probes = field(out, "probes", list)
    expect(len(probes) == len(event["probes"]), "wrong number of probes")
    for (x, y), got in zip(event["probes"], probes):
        want = [int(v) for v in src[x, w - 1 - y]]
        expect(got == [x, y, want], "rotated pixel (%d,%d) is %r, expected %r", x, y, got, want)
    jb = field(out, "jpeg_bytes", int)
    expect(1000 < jb < w * h * 3, "implausible JPEG size %d", jb)


def check_lr_serving(event, exp, out):
    import pickle

    with open(event["path"], "rb") as f:
        reviews = f.read().decode("utf-8").split("\n")
    n = exp["n"]
    bits = field(out, "predictions", str)
    expect(field(out, "n", int) == n == len(reviews) == len(bits), "wrong number of predictions")
    expect(set(bits) <= {"0", "1"}, "predictions are not 0/1")
    expect(field(out, "positive", int) == bits.count("1"), "positive count inconsistent")
    expect(field(out, "predictions_sha256", str) == hashlib.sha256(bits.encode()).hexdigest(), "digest inconsistent")
    truth = exp["labels"]
    acc = sum(a == b for a, b in zip(bits, truth)) / n
    expect(acc >= 0.9, "accuracy against the true labels is %.3f (< 0.9)", acc)
    with open(os.path.join(BASE, "inputs/lr_serving/model.pkl"), "rb") as f:
        model = pickle.load(f)
    ref = "".join("1" if p else "0" for p in model.predict(reviews))
    expect(ref == bits, "predictions differ from the model's")


def check_lr_training(event, exp, out):
    for k in ("n_samples", "n_train", "n_features"):
        expect(field(out, k, int) == exp[k], "%s is %r, expected %r", k, out.get(k), exp[k])
    tr, ho = field(out, "train_accuracy", float), field(out, "holdout_accuracy", float)
    expect(tr >= 0.9, "train accuracy %.3f < 0.9", tr)
    expect(ho >= 0.85, "holdout accuracy %.3f < 0.85", ho)
    pos, neg = field(out, "top_positive", list), field(out, "top_negative", list)
    expect(len(pos) == 10 and len(neg) == 10, "need 10 top words each way")
    npos = sum(w in thawgen.POSITIVE for w in pos)
    nneg = sum(w in thawgen.NEGATIVE for w in neg)
    expect(npos >= 8, "only %d of the top positive words are positive: %r", npos, pos)
    expect(nneg >= 8, "only %d of the top negative words are negative: %r", nneg, neg)
    expect(not set(pos) & set(thawgen.NEGATIVE), "a negative word ranks as positive: %r", pos)
    expect(not set(neg) & set(thawgen.POSITIVE), "a positive word ranks as negative: %r", neg)
    expect(field(out, "model_bytes", int) > 1000, "serialised model implausibly small")


def check_matmul(event, exp, out):
    import numpy as np

    n = event["n"]
    g = np.random.default_rng(event["seed"])
    a = g.random((n, n))
    b = g.random((n, n))
    expect(field(out, "n", int) == n, "wrong n")
    # sum(AB) = (1^T A)(B 1); trace(AB) = sum(A * B^T): no full product needed.
    want_sum = float(a.sum(axis=0) @ b.sum(axis=1))
    want_trace = float((a * b.T).sum())
    expect(close(field(out, "sum", float), want_sum, 1e-9), "sum %r, expected %r", out.get("sum"), want_sum)
    expect(close(field(out, "trace", float), want_trace, 1e-9), "trace %r, expected %r", out.get("trace"), want_trace)
    samples = field(out, "samples", list)
    expect(len(samples) == len(event["probes"]), "wrong number of samples")
    for (i, j), got in zip(event["probes"], samples):
        want = math.fsum(a[i, k] * b[k, j] for k in range(n))
        expect(got[:2] == [i, j] and close(got[2], want, 1e-9), "C[%d,%d] is %r, expected %r", i, j, got, want)
    # Frobenius norm: bounded by sum (entries are positive): ||C||_F <= sum(C).
    fro = field(out, "fro", float)
    expect(want_sum / n <= fro <= want_sum, "implausible Frobenius norm %r", fro)


def check_compress(event, exp, out):
    import zlib

    with open(event["path"], "rb") as f:
        data = f.read()
    expect(hashlib.sha256(data).hexdigest() == exp["input_sha256"], "input file changed")
    expect(field(out, "input_bytes", int) == exp["input_bytes"], "input_bytes wrong")
    expect(field(out, "input_crc32", int) == exp["input_crc32"], "input crc32 wrong")
    packed = zlib.compress(data, event.get("level", 6))
    expect(zlib.decompress(packed) == data, "reference round trip failed")
    expect(field(out, "compressed_bytes", int) == len(packed), "compressed size %r, expected %d", out.get("compressed_bytes"), len(packed))
    expect(field(out, "compressed_sha256", str) == hashlib.sha256(packed).hexdigest(), "compressed bytes differ")
    expect(close(field(out, "ratio", float), len(data) / len(packed), 1e-9), "ratio wrong")
    expect(len(data) / len(packed) > 1.5, "text did not compress")
    expect(field(out, "roundtrip_ok") is True, "decompression did not give back the input")


def check_node_compress(event, exp, out):
    # the same facts: pako's deflate must give zlib's bytes
    check_compress(event, exp, out)


def check_pagerank(event, exp, out):
    import networkx as nx
    import numpy as np

    n, m = event["nodes"], event["m"]
    g = nx.barabasi_albert_graph(n, m, seed=event["seed"])
    expect(field(out, "nodes", int) == n == exp["nodes"], "nodes wrong")
    expect(field(out, "edges", int) == g.number_of_edges() == exp["edges"], "edges wrong")
    # Independent PageRank: numpy power iteration over the edge list.
    e = np.array(list(g.edges()), dtype=np.int64)
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    deg = np.bincount(src, minlength=n).astype(float)
    x = np.full(n, 1.0 / n)
    for _ in range(500):
        y = 0.15 / n + 0.85 * np.bincount(dst, weights=x[src] / deg[src], minlength=n)
        done = np.abs(y - x).sum() < 1e-13
        x = y
        if done:
            break
    expect(close(field(out, "sum", float), 1.0, 1e-6), "scores sum to %r", out.get("sum"))
    top = field(out, "top", list)
    expect(len(top) == 10, "need the top 10")
    order = sorted(range(n), key=lambda i: (-x[i], i))[:10]
    for rank, (got, want) in enumerate(zip(top, order)):
        expect(int(got[0]) == want or close(x[int(got[0])], x[want], 1e-6), "rank %d is node %r, expected %d", rank, got[0], want)
        expect(close(got[1], x[int(got[0])], 1e-5), "score of node %r is %r, expected %r", got[0], got[1], float(x[int(got[0])]))


def check_float_operation(event, exp, out):
    import numpy as np

    n = event["n"]
    expect(field(out, "n", int) == n, "wrong n")
    x = np.arange(n, dtype=np.float64)
    # sin(x)cos(x) = sin(2x)/2, summed by numpy instead of a Python loop.
    want = 0.5 * math.fsum(np.sin(2 * x)) + math.fsum(np.sqrt(x))
    expect(close(field(out, "result", float), want, 1e-9, 1e-6), "result %r, expected %r", out.get("result"), want)


def check_linpack(event, exp, out):
    import numpy as np

    n = event["n"]
    g = np.random.default_rng(event["seed"])
    a = g.random((n, n)) + n * np.eye(n)
    b = g.random(n)
    x = np.linalg.solve(a, b)
    expect(field(out, "n", int) == n, "wrong n")
    head = field(out, "x_head", list)
    expect(len(head) == min(8, n), "x_head has the wrong length")
    for i, v in enumerate(head):
        expect(close(v, x[i], 1e-8), "x[%d] is %r, expected %r", i, v, float(x[i]))
    expect(close(field(out, "x_sum", float), x.sum(), 1e-8), "x_sum wrong")
    expect(0 <= field(out, "residual", float) < 1e-10, "residual %r too large", out.get("residual"))
    # The reported head really solves its rows: check two rows against the full x.
    r0 = float(a[0] @ x - b[0])
    expect(abs(r0) < 1e-8, "reference solution inconsistent")


CHECKS = {name[len("check_"):]: f for name, f in list(globals().items()) if name.startswith("check_")}


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: check.py FUNCTION SIZE < output.json\n")
        return 2
    fn, size = argv[1], argv[2]
    try:
        expect(fn in CHECKS, "no checker for function %r", fn)
        expect(size in thawgen.SIZES, "unknown size %r", size)
        try:
            out = json.loads(sys.stdin.buffer.read())
        except ValueError as e:
            raise CheckError("output is not JSON: %s" % e)
        with open(os.path.join(BASE, "inputs", fn, size + ".json"), "rb") as f:
            event = json.load(f)
        with open(os.path.join(BASE, "expected", fn, size + ".json"), "rb") as f:
            exp = json.load(f)
        CHECKS[fn](event, exp, out)
    except CheckError as e:
        sys.stderr.write("CHECK FAILED: %s\n" % e)
        return 1
    except Exception as e:  # a malformed output that trips the checker itself
        sys.stderr.write("CHECK FAILED: %s: %s\n" % (type(e).__name__, e))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
