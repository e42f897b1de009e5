#!/usr/bin/env python3
"""A round's cost at fixed acceptance, from one `tessera bench --methods ... --draft-lens ...
--json` output (scripts/gpu-check.sh, step 5b; issue 42's target: a round costs at most 1.3x one
target step plus k draft steps).

Usage: round_cost.py BENCH_OUTPUT DRAFT_STEP_MS

Reads the last JSON object with "methods" in BENCH_OUTPUT: the vanilla row's milliseconds per
target forward are the target step; each other row with a fixed draft_len k gives its round's
milliseconds (all phases over its target forwards, the prefill counted as one) and
round / (target step + k * DRAFT_STEP_MS). Prints one line, e.g.
"k=4: round 12.100 ms = 0.95x (target 9.800 + 4 x 0.800 ms), MAL 5.00; k=8: ...", or nothing
when there is no such output.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_json import last_methods  # noqa: E402


def ms_per_forward(r):
    return 1e3 * sum(r["time_split_s"].values()) / max(1, r["batched_target_forwards"])


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: round_cost.py BENCH_OUTPUT DRAFT_STEP_MS")
    rows = last_methods(open(sys.argv[1]).read())
    draft_ms = float(sys.argv[2])
    if not rows:
        return
    vanilla = [r for r in rows if r["method"] == "vanilla"]
    if not vanilla:
        return
    step = ms_per_forward(vanilla[0])
    out = []
    for r in rows:
        k = r.get("draft_len")
        if r["method"] == "vanilla" or not isinstance(k, int):
            continue
        rnd = ms_per_forward(r)
        ratio = rnd / (step + k * draft_ms)
        out.append(f"k={k}: round {rnd:.3f} ms = {ratio:.2f}x (target {step:.3f} + {k} x "
                   f"{draft_ms:.3f} ms), MAL {r['mean_accepted_length']:.2f}")
    print("; ".join(out))


if __name__ == "__main__":
    main()
