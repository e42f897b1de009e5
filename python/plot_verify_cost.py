#!/usr/bin/env python3
"""Plot `tessera bench --verify-cost -o csv` (or `-o json`) curves: a forward's cost against k, as a ratio to k = 1,
beside the roofline bound. A documentation tool (docs/performance.md), not a test dependency; it
needs matplotlib (pip install matplotlib).

Usage: python3 python/plot_verify_cost.py OUT.png LABEL=FILE.csv|FILE.json [LABEL=FILE ...]
"""
import csv
import json
import sys


def read_curve(path):
    with open(path, newline="") as f:
        if path.endswith(".json"):
            rows = json.load(f).get("rows", [])
        else:
            rows = list(csv.DictReader(f))
    if not rows or "ratio" not in rows[0]:
        sys.exit(f"{path}: not a `tessera bench --verify-cost -o csv|json` output")
    return ([int(r["k"]) for r in rows], [float(r["ratio"]) for r in rows],
            [float(r["roofline_ratio"]) for r in rows])


def main(argv):
    if len(argv) < 3 or any("=" not in a for a in argv[2:]):
        sys.exit(__doc__.strip().splitlines()[-1])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for i, spec in enumerate(argv[2:]):
        label, path = spec.split("=", 1)
        k, measured, bound = read_curve(path)
        color = f"C{i}"
        ax.plot(k, measured, "o-", color=color, markersize=3, label=f"{label}: measured")
        ax.plot(k, bound, "--", color=color, label=f"{label}: roofline bound")
    ax.set_xlabel("k: new positions per forward (root + k - 1 drafts)")
    ax.set_ylabel("forward time / one-position forward")
    ax.set_title("Verification cost against k (tessera bench --verify-cost)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[1])


if __name__ == "__main__":
    main(sys.argv)
