"""Functions for tests/xdt_store.rs: the object-store SDK calls, and every error
they raise caught and returned (so the test sees the function carry on)."""
import thaw


def roundtrip(event):
    data = bytes(range(256)) * (event["size"] // 256)
    n = thaw.store_put(event["key"], data)
    view = thaw.store_get(event["key"])
    try:
        view[0] = 1
        readonly = False
    except TypeError:
        readonly = True
    return {"put": n, "n": len(view), "same": bytes(view) == data, "readonly": readonly}


def attempt(event):
    try:
        if event["op"] == "get":
            return {"n": len(thaw.store_get(event["key"]))}
        if event["op"] == "put_str":
            thaw.store_put(event["key"], "not bytes")
        else:
            thaw.store_put(event["key"], b"x")
        return {"ok": True}
    except thaw.ThawError as e:
        return {"kind": e.kind, "message": e.message}
    except TypeError as e:
        return {"kind": "TypeError", "message": str(e)}
