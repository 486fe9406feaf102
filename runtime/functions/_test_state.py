"""TEST ONLY: module-level state a clone can change, to show that clones of
one snapshot never see each other's writes (or change the snapshot)."""
import random

_state = {"value": None, "ballast": bytearray(4 << 20)}


def handler(event):
    if "set" in event:
        _state["value"] = event["set"]
        # touch every page of the ballast so the write lands all over memory
        for i in range(0, len(_state["ballast"]), 4096):
            _state["ballast"][i] = hash(event["set"]) & 0xFF
    b = _state["ballast"]
    return {
        "value": _state["value"],
        "ballast": sorted(set(b[i] for i in range(0, len(b), 4096))),
        "random": random.random(),
    }
