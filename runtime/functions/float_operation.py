"""float_operation: sin/cos/sqrt over N numbers in pure Python (FunctionBench /
TOSS `float_operation`)."""
import math


def handler(event):
    n = int(event["n"])
    acc = 0.0
    for i in range(n):
        x = float(i)
        acc += math.sin(x) * math.cos(x) + math.sqrt(x)
    return {"n": n, "result": acc}
