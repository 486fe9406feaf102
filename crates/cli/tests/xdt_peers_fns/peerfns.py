"""Functions for tests/xdt_peers.rs: a producer on one worker, consumers on the
other; every SDK error is caught and returned (the test sees the function carry on)."""
import os

import thaw


def pattern(size):
    block = bytes(range(251))
    whole, rest = divmod(size, len(block))
    return block * whole + block[:rest]


def produce(event):
    data = pattern(event["size"])
    return {"ref": thaw.put(data, retrievals=event.get("retrievals", 1), ttl_s=event.get("ttl_s"))}


def consume(event):
    try:
        view = thaw.get(event["ref"])
    except thaw.ThawError as e:
        return {"kind": e.kind, "message": e.message}
    try:
        view[0] = 1
        readonly = False
    except TypeError:
        readonly = True
    return {"n": len(view), "same": view == pattern(len(view)), "readonly": readonly}


def call(event):
    try:
        return {"output": thaw.invoke(event["function"], event.get("event"))}
    except thaw.ThawError as e:
        return {"kind": e.kind, "message": e.message}
