"""Shared pieces of the emoji training scripts: dataset loading, classes, logging, seeding."""
import json
import os
import random
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/ (tessera_ref)


class EmojiData:
    """images.npy + meta.json from build_dataset.py. Class id = emoji * n_styles + style."""

    def __init__(self, data_dir):
        self.meta = json.load(open(os.path.join(data_dir, "meta.json")))
        self.images = np.load(os.path.join(data_dir, "images.npy"))
        self.styles = self.meta["styles"]
        self.emoji = self.meta["emoji"]
        self.num_classes = len(self.emoji) * len(self.styles)
        rows = self.meta["images"]
        self.labels = np.array([r["emoji"] * len(self.styles) + self.styles.index(r["style"]) for r in rows])
        self.split = np.array([r["split"] for r in rows])

    def indices(self, split):
        return np.nonzero(self.split == split)[0]

    def class_name(self, c):
        return f"{self.emoji[c // len(self.styles)]['name']} ({self.styles[c % len(self.styles)]})"

    def tensor(self, idx):
        """uint8 NHWC -> float NCHW in [-1, 1]."""
        x = torch.from_numpy(self.images[idx]).float().permute(0, 3, 1, 2)
        return x / 127.5 - 1.0


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def add_run_args(ap):
    """--seed and --threads, shared by every training script."""
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)


def start_run(a, out):
    """Threads, seeds and the output directory; returns the dataset (a.data)."""
    torch.set_num_threads(a.threads)
    seed_all(a.seed)
    os.makedirs(out, exist_ok=True)
    return EmojiData(a.data)


class Log:
    """Tab-separated training log (step, seconds, metrics...) plus a progress line on stderr."""

    def __init__(self, path, seconds_before=0.0):
        """seconds_before: training time of the runs this one resumes (the logged seconds are
        cumulative across resumptions)."""
        self.f = open(path, "a")
        self.t0 = time.time() - seconds_before

    def seconds(self):
        return time.time() - self.t0

    def __call__(self, step, **metrics):
        el = self.seconds()
        self.f.write("\t".join([str(step), f"{el:.1f}"] + [f"{k}={v:.5g}" for k, v in metrics.items()]) + "\n")
        self.f.flush()
        print(f"step {step} {el:.0f}s " + " ".join(f"{k} {v:.4g}" for k, v in metrics.items()),
              file=sys.stderr, flush=True)
