#!/usr/bin/env python3
"""Headline figures from `thaw bench restore --json` files: per strategy, the
mean over (function, input) cells of the median cold-start ratio to mmap and
to a fresh start, median faults served, and (tiered) slow-tier share.

usage: scripts/summary.py FILE.jsonl [...]
"""
import json
import statistics
import sys
from collections import defaultdict


def main(paths):
    cells = defaultdict(list)
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                cells[(r["tier"], r["function"], r["input"], r["strategy"])].append(r)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    by = defaultdict(lambda: defaultdict(list))
    for (tier, fn, inp, strat), rs in cells.items():
        mmap = cells.get((tier, fn, inp, "mmap"))
        fresh = cells.get((tier, fn, inp, "fresh"))
        row = by[(tier, strat)]
        if mmap:
            row["speedup_vs_mmap"].append(med(mmap, "cold_ms") / med(rs, "cold_ms"))
        if fresh:
            row["speedup_vs_fresh"].append(med(fresh, "cold_ms") / med(rs, "cold_ms"))
        row["faults"].append(med(rs, "faults"))
        row["first_over_warm"].append(med(rs, "first_response_ms") / max(med(rs, "warm_ms"), 1e-6))
        row["slow_share"].append(med(rs, "slow_tier_share"))
        row["cells"].append(1)
    print("| tier | strategy | cells | cold-start speed-up vs mmap (mean of medians) | vs fresh | faults served (mean of medians) | first response / warm (mean) | slow-tier share (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for (tier, strat), row in sorted(by.items()):
        m = lambda k: statistics.mean(row[k]) if row[k] else float("nan")
        print(f"| {tier} | {strat} | {len(row['cells'])} | {m('speedup_vs_mmap'):.2f}x | {m('speedup_vs_fresh'):.1f}x | {m('faults'):.0f} | {m('first_over_warm'):.2f} | {m('slow_share') * 100:.0f}% |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
