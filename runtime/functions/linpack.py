"""linpack: solve A x = b for a random dense n x n system with numpy/LAPACK
(FunctionBench / TOSS `linpack`)."""
import numpy as np


def handler(event):
    n = int(event["n"])
    rng = np.random.default_rng(int(event["seed"]))
    a = rng.random((n, n)) + n * np.eye(n)
    b = rng.random(n)
    x = np.linalg.solve(a, b)
    resid = float(np.linalg.norm(a @ x - b) / np.linalg.norm(b))
    flops = 2.0 / 3.0 * n**3 + 2.0 * n**2
    return {
        "n": n,
        "residual": resid,
        "x_head": [float(v) for v in x[:8]],
        "x_sum": float(x.sum()),
        "flops": flops,
    }
