#!/usr/bin/env python3
"""Measure the emoji model as the model card reports it: generate one image per sampled class
(each class with its own sampling seed) with the tessera CLI (default settings unless given), classify them with the committed
classifier, and compute a Frechet distance in the classifier's 256-d feature space against the
held-out images. Reference rows put the number in context: real training drawings and their VQ
reconstructions, measured the same way.

Usage: /usr/bin/python3 python/emoji/evaluate.py --data DATA --model models/emoji/target
         --classifier models/emoji/classifier --tessera build/tessera [--classes 200] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

from classifier import load as load_classifier, to_input
from common import EmojiData
from tessera_ref.atomic_io import atomic_write


def frechet(a, b):
    """Frechet distance between Gaussians fitted to feature sets a [n, d] and b [m, d]."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # tr((s1 s2)^1/2) via the eigenvalues of s1^1/2 s2 s1^1/2 (symmetric, PSD).
    w, v = np.linalg.eigh(s1)
    r1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = r1 @ s2 @ r1
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * tr_sqrt)


def eval_classes(data, n, seed):
    """n distinct training classes drawn with a fixed seed (the same list every run)."""
    train_classes = np.unique(data.labels[data.indices("train")])
    rng = np.random.default_rng(seed)
    return sorted(rng.choice(train_classes, size=min(n, len(train_classes)), replace=False).tolist())


def sampling_seed(seed, c):
    """The generate seed of class c in evaluation run `seed`: distinct per class, so that classes do
    not share one random stream (with one seed for all, every class drew the same uniforms, and a
    run's errors were correlated)."""
    return seed * 100003 + c


def generate(tessera, model, classes, seed, extra, out_dir):
    """One image per class, seed sampling_seed(seed, class); returns uint8 [n, 64, 64, 3]."""
    imgs = []
    for i, c in enumerate(classes):
        path = os.path.join(out_dir, f"c{c}.png")
        subprocess.run([tessera, "generate", "-m", model, "--class", str(c), "-s", str(sampling_seed(seed, c)),
                        "-o", path, "-q"] + extra, check=True)
        with Image.open(path) as im:
            imgs.append(np.asarray(im.convert("RGB")))
        if (i + 1) % 50 == 0:
            print(f"generated {i + 1}/{len(classes)}", file=sys.stderr)
    return np.stack(imgs)


def classify(clf, pixels):
    with torch.no_grad():
        x = to_input(pixels)
        return clf(x), clf.features(x).numpy()


def class_ranks(logits, want):
    """1-based rank of each requested class among the classifier's logits."""
    return (logits > logits.gather(1, want[:, None])).sum(1).float() + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--classifier", required=True)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--classes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra", default="", help="extra generate flags, e.g. '--method sd --draft DIR'")
    ap.add_argument("--vq-tokens", help="tokens.npy: also measure VQ reconstructions")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(2)
    data = EmojiData(a.data)
    clf = load_classifier(a.classifier)
    classes = eval_classes(data, a.classes, a.seed)
    n_styles = len(data.styles)
    with tempfile.TemporaryDirectory() as tmp:
        gen = generate(a.tessera, a.model, classes, a.seed, a.extra.split(), tmp)
    logits, f_gen = classify(clf, gen)
    want = torch.tensor(classes)
    top5 = logits.topk(5, dim=1).indices
    res = {"model": a.model, "classes": len(classes), "seed": a.seed, "extra_flags": a.extra,
           "top1_class": float((top5[:, 0] == want).float().mean()),
           "top5_class": float((top5 == want[:, None]).any(1).float().mean()),
           "top1_emoji": float((top5[:, 0] // n_styles == want // n_styles).float().mean()),
           # 1 = the requested class is the classifier's first choice; chance is ~num_classes / 2.
           "median_rank_of_requested_class": float(class_ranks(logits, want).median()),
           "chance_median_rank": (data.num_classes + 1) / 2}
    held = data.indices("held_out")
    _, f_held = classify(clf, data.images[held])
    res["frechet_generated_vs_held_out"] = frechet(f_gen, f_held)
    # Reference: the real training drawings of the same classes, and their VQ reconstructions.
    train = data.indices("train")
    by_class = {int(data.labels[i]): i for i in train}
    real = data.images[[by_class[c] for c in classes]]
    logits_r, f_real = classify(clf, real)
    res["top1_class_real_drawings"] = float((logits_r.argmax(1) == want).float().mean())
    res["frechet_real_train_vs_held_out"] = frechet(f_real, f_held)
    if a.vq_tokens:
        from encode_dataset import load_vq  # noqa: E402 (only needed here)
        vq_path = os.path.join(os.path.dirname(a.vq_tokens), "vq.pt")
        vq = load_vq(vq_path)
        tok = torch.from_numpy(np.load(a.vq_tokens)[[by_class[c] for c in classes]]).long()
        with torch.no_grad():
            rec = torch.clamp(127.5 * vq.decode_code(tok) + 128, 0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        logits_q, f_rec = classify(clf, rec)
        res["top1_class_vq_reconstructions"] = float((logits_q.argmax(1) == want).float().mean())
        res["frechet_vq_reconstructions_vs_held_out"] = frechet(f_rec, f_held)
    print(json.dumps(res, indent=1))
    if a.json:
        with atomic_write(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
