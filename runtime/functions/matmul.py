"""matmul: product of two random n x n matrices with numpy (FunctionBench `matmul`,
SYSTOR'22 `matmul_fb`, TOSS / PASS `matmul`)."""
import numpy as np


def handler(event):
    n = int(event["n"])
    rng = np.random.default_rng(int(event["seed"]))
    a = rng.random((n, n))
    b = rng.random((n, n))
    c = a @ b
    return {
        "n": n,
        "sum": float(c.sum()),
        "trace": float(np.trace(c)),
        "fro": float(np.linalg.norm(c)),
        "samples": [[i, j, float(c[i, j])] for i, j in event.get("probes", [])],
    }
