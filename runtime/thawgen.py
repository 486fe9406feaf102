"""Shared, deterministic definitions of the function inputs: sizes, seeds, and the
synthetic data (review corpus, JSON documents, text, images). Used by gen_inputs.py
(at root build time) and check.py (trusted checkers). Installed as
/opt/thaw/thawgen.py; not imported by the functions themselves."""

import hashlib
import random

SIZES = ("I", "II", "III", "IV")

PARAMS = {
    "helloworld": [5, 64, 1024, 16384],
    "pyaes": [256, 4096, 16384, 65536],
    "chameleon": [(10, 10), (50, 20), (200, 25), (1000, 50)],
    "json_serdes": [50, 500, 5000, 20000],
    "image_rotate": [(320, 240), (640, 480), (1280, 960), (2560, 1920)],
    "lr_serving": [10, 100, 1000, 10000],
    "lr_training": [250, 1000, 4000, 10000],
    "matmul": [100, 500, 1000, 2000],
    "compress": [256 << 10, 1 << 20, 4 << 20, 8 << 20],
    "pagerank": [1000, 5000, 15000, 30000],
    "float_operation": [1000, 10000, 100000, 1000000],
    "linpack": [100, 500, 1000, 2000],
    "idle_threads_1": [5, 64, 1024, 16384],
    "idle_threads_8": [5, 64, 1024, 16384],
}

PAGERANK_M = 4
LR_SERVING_TRAIN = 3000


def param(function, size):
    return PARAMS[function][SIZES.index(size)]


def seed_of(*parts):
    """A stable 32-bit seed from names (never Python's randomised hash())."""
    h = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:4], "little")


def rng(*parts):
    return random.Random(seed_of(*parts))


# ------------------------------------------------------------------ reviews

POSITIVE = (
    "great excellent love loved wonderful perfect amazing fantastic happy recommend "
    "best superb delightful brilliant pleasant reliable sturdy beautiful awesome enjoyable"
).split()
NEGATIVE = (
    "terrible awful hate hated horrible broken worst poor disappointing useless "
    "refund flimsy defective annoying bad faulty cheap waste ugly returned"
).split()
_SYLLABLES = "ka lo mi ne ru sa ti vo ze pa do fi gu ha je ku la mo".split()


def neutral_words():
    r = random.Random(7)
    words = set()
    base = (
        "the product it was and item delivery box price quality this that with for "
        "arrived after days size colour color order seller package use using works "
        "bought again would some very really quite just also"
    ).split()
    words.update(base)
    while len(words) < 300:
        w = "".join(r.choice(_SYLLABLES) for _ in range(r.randint(2, 4)))
        words.add(w)
    return sorted(words)


NEUTRAL = neutral_words()


def review(r, label):
    """One review with a known sentiment label (1 positive, 0 negative)."""
    own = POSITIVE if label else NEGATIVE
    other = NEGATIVE if label else POSITIVE
    words = [r.choice(NEUTRAL) for _ in range(r.randint(6, 14))]
    for _ in range(r.randint(2, 4)):
        words.insert(r.randrange(len(words) + 1), r.choice(own))
    if r.random() < 0.2:
        words.insert(r.randrange(len(words) + 1), r.choice(other))
    return " ".join(words)


def reviews(n, *seed_parts):
    r = rng("reviews", *seed_parts)
    out = []
    for _ in range(n):
        label = 1 if r.random() < 0.5 else 0
        out.append((review(r, label), label))
    return out


# ------------------------------------------------------------------ JSON documents


def json_document(n, *seed_parts):
    r = rng("json", *seed_parts)
    records = []
    for i in range(n):
        records.append(
            {
                "id": i,
                "sku": "SKU-%06d" % r.randrange(10**6),
                "name": " ".join(r.choice(NEUTRAL) for _ in range(r.randint(1, 4))),
                "price": round(r.uniform(0.5, 500.0), 2),
                "quantity": r.randint(1, 20),
                "tags": [r.choice(NEUTRAL) for _ in range(r.randint(0, 4))],
                "in_stock": r.random() < 0.8,
                "rating": None if r.random() < 0.1 else round(r.uniform(1, 5), 1),
                "note": "caf\u00e9 \u2603 \"quoted\" \\ tab\t" if i % 97 == 0 else "",
            }
        )
    return {"version": 1, "generated_by": "thawgen", "records": records}


# ------------------------------------------------------------------ text


def text_blob(nbytes, *seed_parts):
    r = rng("text", *seed_parts)
    vocab = NEUTRAL + POSITIVE + NEGATIVE
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf-like
    out = []
    size = 0
    while size < nbytes:
        words = r.choices(vocab, weights=weights, k=4096)
        chunk = (" ".join(words) + ".\n").encode()
        out.append(chunk)
        size += len(chunk)
    return b"".join(out)[:nbytes]
