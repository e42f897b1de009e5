#!/usr/bin/env python3
"""Loss curves for the model card: RUNS/{vq,target,draft,classifier}_log.tsv -> OUT.png
(Debian's python3-matplotlib)."""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    """(step, metrics) rows by step. A resumed run repeats the steps after its last save: the
    later line of a step wins."""
    rows = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        rows[int(f[0])] = {k: float(v) for k, v in (x.split("=") for x in f[2:])}
    return sorted(rows.items())


def series(rows, key):
    pts = [(s, m[key]) for s, m in rows if key in m]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    panels = [("vq", [("rec", "reconstruction (L1+MSE)"), ("psnr_held_out", "held-out PSNR (dB)")]),
              ("target", [("loss", "train loss (5% noisy inputs)"),
                          ("nll_train_sample", "train NLL (256 images, clean)"),
                          ("nll_held_out", "held-out NLL"),
                          ("nll_held_out_uncond", "held-out NLL, null class")]),
              ("draft", [("loss", "train loss"), ("nll_held_out", "held-out NLL"),
                         ("nll_held_out_uncond", "held-out NLL, null class")]),
              ("classifier", [("loss", "train loss")])]
    panels = [(n, k) for n, k in panels if os.path.exists(os.path.join(a.runs, f"{n}_log.tsv"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (name, keys) in zip(axes, panels):
        rows = read(os.path.join(a.runs, f"{name}_log.tsv"))
        for key, label in keys:
            x, y = series(rows, key)
            if not x:
                continue
            if key == "psnr_held_out":
                ax2 = ax.twinx()
                ax2.plot(x, y, "o-", color="tab:red", label=label)
                ax2.set_ylabel(label, color="tab:red")
            else:
                ax.plot(x, y, "-" if len(x) > 20 else "o-", label=label)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("nats / token" if name in ("target", "draft") else "loss")
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
