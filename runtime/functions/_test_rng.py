"""TEST ONLY: returns draws from every random generator the agent re-seeds after a
restore (random, numpy.random, a module-level generator via the reseed hook)."""
import random

import numpy as np

_own = random.Random(1234)


def reseed(seed):
    _own.seed(seed)


def handler(event):
    return {
        "random": random.random(),
        "numpy": float(np.random.random()),
        "module": _own.random(),
    }
