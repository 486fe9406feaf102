"""json_serdes: deserialise a JSON document, modify it, serialise it again
(FunctionBench `json_dumps_loads`, vHive `json_serdes`, TOSS `json_load_dump`)."""
import hashlib
import json


def handler(event):
    with open(event["path"], "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    total = 0.0
    for rec in doc["records"]:
        rec["total"] = round(rec["price"] * rec["quantity"], 2)
        total += rec["total"]
    out = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    back = json.loads(out)
    return {
        "input_bytes": len(raw),
        "records": len(doc["records"]),
        "grand_total": round(total, 2),
        "output_bytes": len(out),
        "output_sha256": hashlib.sha256(out).hexdigest(),
        "roundtrip_ok": back == doc,
    }
