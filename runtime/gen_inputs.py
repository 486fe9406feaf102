"""Generates every function's inputs deterministically (no downloads), at root build
time, inside the root (so with the root's own Python, numpy and Pillow):

    /opt/thaw/inputs/FUNCTION/SIZE.json     the event given to handler()
    /opt/thaw/inputs/FUNCTION/...           side files (documents, images, datasets)
    /opt/thaw/expected/FUNCTION/SIZE.json   facts the checker compares against

Run as: python3 -B gen_inputs.py /opt/thaw   (PYTHONHASHSEED=0 for stable pickles)
"""

import hashlib
import json
import os
import pickle
import sys
import time

import thawgen
from thawgen import SIZES, param, seed_of


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class Gen:
    def __init__(self, base):
        self.base = base
        self.inputs = os.path.join(base, "inputs")
        self.expected = os.path.join(base, "expected")

    def path(self, fn, name):
        return os.path.join(self.inputs, fn, name)

    def emit(self, fn, size, event, expected):
        write_json(os.path.join(self.inputs, fn, size + ".json"), event)
        write_json(os.path.join(self.expected, fn, size + ".json"), expected)

    # ------------------------------------------------------------------
    def helloworld(self, size, fn="helloworld", expected=None):
        n = param(fn, size)
        r = thawgen.rng(fn, size)
        name = "World" if n == 5 else "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
        self.emit(fn, size, {"name": name}, dict(expected or {}, message="Hello, %s!" % name))

    def idle_threads_1(self, size):
        self.helloworld(size, "idle_threads_1", {"threads": 1})

    def idle_threads_8(self, size):
        self.helloworld(size, "idle_threads_8", {"threads": 8})

    def node_helloworld(self, size, fn="node_helloworld"):
        # helloworld's events under another runtime's function's name
        with open(os.path.join(self.inputs, "helloworld", size + ".json"), encoding="utf-8") as f:
            event = json.load(f)
        self.emit(fn, size, event, {"message": "Hello, %s!" % event["name"]})

    def java_hello(self, size):
        self.node_helloworld(size, "java_hello")

    def pyaes(self, size):
        n = param("pyaes", size)
        r = thawgen.rng("pyaes", size)
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,"
        message = "".join(r.choice(alphabet) for _ in range(n))
        key = bytes(r.randrange(256) for _ in range(32)).hex()
        self.emit("pyaes", size, {"message": message, "key_hex": key, "iterations": 1}, {"length": n})

    def chameleon(self, size):
        rows, cols = param("chameleon", size)
        r = thawgen.rng("chameleon", size)
        probes = [[0, 0], [rows - 1, cols - 1]] + [[r.randrange(rows), r.randrange(cols)] for _ in range(6)]
        self.emit("chameleon", size, {"rows": rows, "cols": cols, "probes": probes}, {"rows": rows, "cols": cols})

    def json_serdes(self, size):
        n = param("json_serdes", size)
        doc = thawgen.json_document(n, size)
        raw = json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")
        path = self.path("json_serdes", size + ".data.json")
        write_bytes(path, raw)
        # The expected result, computed from the generator's own objects.
        total = 0.0
        for rec in doc["records"]:
            rec["total"] = round(rec["price"] * rec["quantity"], 2)
            total += rec["total"]
        canon = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
        self.emit(
            "json_serdes",
            size,
            {"path": "/opt/thaw/inputs/json_serdes/%s.data.json" % size},
            {
                "input_bytes": len(raw),
                "records": n,
                "grand_total": round(total, 2),
                "output_bytes": len(canon),
                "output_sha256": hashlib.sha256(canon).hexdigest(),
            },
        )

    def image_rotate(self, size):
        import numpy as np
        from PIL import Image, ImageDraw

        w, h = param("image_rotate", size)
        g = np.random.default_rng(seed_of("image", size))
        y, x = np.mgrid[0:h, 0:w]
        arr = np.zeros((h, w, 3), dtype=np.float64)
        arr[..., 0] = 255 * x / max(1, w - 1)
        arr[..., 1] = 255 * y / max(1, h - 1)
        arr[..., 2] = 127 + 127 * np.sin(x / 23.0) * np.cos(y / 17.0)
        arr += g.normal(0, 6, size=arr.shape)
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
        d = ImageDraw.Draw(img)
        r = thawgen.rng("image-shapes", size)
        for _ in range(12):
            x0, y0 = r.randrange(w), r.randrange(h)
            x1, y1 = min(w - 1, x0 + r.randrange(w // 4 + 1)), min(h - 1, y0 + r.randrange(h // 4 + 1))
            colour = (r.randrange(256), r.randrange(256), r.randrange(256))
            if r.random() < 0.5:
                d.rectangle([x0, y0, x1, y1], fill=colour)
            else:
                d.ellipse([x0, y0, x1, y1], outline=colour, width=3)
        path = self.path("image_rotate", size + ".jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        img.save(path, format="JPEG", quality=90)
        # Probes in rotated coordinates: the rotated image is h wide and w high.
        probes = [[0, 0], [h - 1, w - 1]] + [[r.randrange(h), r.randrange(w)] for _ in range(14)]
        self.emit(
            "image_rotate",
            size,
            {"path": "/opt/thaw/inputs/image_rotate/%s.jpg" % size, "probes": probes},
            {"input_size": [w, h], "output_size": [h, w]},
        )

    def lr_model(self):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        data = thawgen.reviews(thawgen.LR_SERVING_TRAIN, "serving-train")
        model = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=200, random_state=0))
        model.fit([t for t, _ in data], [l for _, l in data])
        path = self.path("lr_serving", "model.pkl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(model, f, protocol=4)

    def lr_serving(self, size):
        n = param("lr_serving", size)
        data = thawgen.reviews(n, "serving", size)
        write_bytes(self.path("lr_serving", size + ".txt"), "\n".join(t for t, _ in data).encode("utf-8"))
        self.emit(
            "lr_serving",
            size,
            {"path": "/opt/thaw/inputs/lr_serving/%s.txt" % size},
            {"n": n, "labels": "".join(str(l) for _, l in data)},
        )

    def lr_training(self, size):
        import re

        n = param("lr_training", size)
        data = thawgen.reviews(n, "training", size)
        lines = [json.dumps({"text": t, "label": l}, sort_keys=True) for t, l in data]
        write_bytes(self.path("lr_training", size + ".jsonl"), ("\n".join(lines) + "\n").encode("utf-8"))
        split = int(n * 0.8)
        token = re.compile(r"(?u)\b\w\w+\b")
        vocab = set()
        for t, _ in data[:split]:
            vocab.update(token.findall(t.lower()))
        self.emit(
            "lr_training",
            size,
            {"path": "/opt/thaw/inputs/lr_training/%s.jsonl" % size},
            {"n_samples": n, "n_train": split, "n_features": len(vocab)},
        )

    def matmul(self, size):
        n = param("matmul", size)
        r = thawgen.rng("matmul-probes", size)
        probes = [[0, 0], [n - 1, n - 1]] + [[r.randrange(n), r.randrange(n)] for _ in range(6)]
        self.emit("matmul", size, {"n": n, "seed": seed_of("matmul", size), "probes": probes}, {"n": n})

    def compress(self, size):
        n = param("compress", size)
        data = thawgen.text_blob(n, size)
        write_bytes(self.path("compress", size + ".txt"), data)
        import zlib

        self.emit(
            "compress",
            size,
            {"path": "/opt/thaw/inputs/compress/%s.txt" % size, "level": 6},
            {"input_bytes": n, "input_crc32": zlib.crc32(data), "input_sha256": hashlib.sha256(data).hexdigest()},
        )

    def node_compress(self, size):
        # compress's text files (not copied) under the Node function's name
        path = self.path("compress", size + ".txt")
        with open(path, "rb") as f:
            data = f.read()
        import zlib

        self.emit(
            "node_compress",
            size,
            {"path": "/opt/thaw/inputs/compress/%s.txt" % size, "level": 6},
            {"input_bytes": len(data), "input_crc32": zlib.crc32(data), "input_sha256": hashlib.sha256(data).hexdigest()},
        )

    def pagerank(self, size):
        n = param("pagerank", size)
        m = thawgen.PAGERANK_M
        self.emit(
            "pagerank",
            size,
            {"nodes": n, "m": m, "seed": seed_of("pagerank", size)},
            {"nodes": n, "edges": m * (n - m)},
        )

    def float_operation(self, size):
        n = param("float_operation", size)
        self.emit("float_operation", size, {"n": n}, {"n": n})

    def linpack(self, size):
        n = param("linpack", size)
        self.emit("linpack", size, {"n": n, "seed": seed_of("linpack", size)}, {"n": n})


def main(argv):
    base = argv[1] if len(argv) > 1 else "/opt/thaw"
    with open(os.path.join(base, "catalog.json"), encoding="utf-8") as f:
        catalog = json.load(f)
    gen = Gen(base)
    t0 = time.time()
    gen.lr_model()
    for fn in catalog["functions"]:
        name = fn["name"]
        t = time.time()
        for size in SIZES:
            getattr(gen, name)(size)
        print("inputs for %-16s %.2fs" % (name, time.time() - t))
        sys.stdout.flush()
    print("all inputs generated in %.1fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
