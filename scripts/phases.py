#!/usr/bin/env python3
"""Phase breakdown (medians) of `thaw bench restore --json` output, as markdown.

usage: scripts/phases.py FILE.jsonl [...]
"""
import json
import statistics
import sys

PHASES = ["state_load_ms", "sandbox_ms", "memory_setup_ms", "resume_ms", "first_response_ms", "cold_ms"]


def main(paths):
    rows = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                key = (r["tier"], r["function"], r["input"], r["strategy"])
                rows.setdefault(key, []).append(r)
    print("| tier | function | input | strategy | state load | sandbox | memory setup | resume | first response | cold start | minflt | majflt |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (tier, fn, inp, strat), rs in rows.items():
        med = lambda k: statistics.median(r[k] for r in rs)
        cells = " | ".join("%.2f" % med(k) for k in PHASES)
        print(f"| {tier} | {fn} | {inp} | {strat} | {cells} | {med('minflt'):.0f} | {med('majflt'):.0f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
