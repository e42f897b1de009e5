#!/usr/bin/python3
"""Writes the goldens of the quality metrics (tests/test_quality.cpp) under tests/fixtures/quality/:

- images.npy (uint8 [4, 64, 64, 3]): two Twemoji drawings of the shipped model's dataset
  (CC-BY 4.0, (c) Twitter, Inc. and other contributors; models/emoji/DATA.md) and two synthetic
  images (seeded noise, a gradient), so that the classifier sees confident and unconfident inputs;
- logits.npy (f32 [4, 870]) and features.npy (f32 [4, 256]): the reference classifier
  (python/emoji/classifier.py, PyTorch, f32) on them;
- frechet_*.npy: seeded feature sets, with their Frechet distances in manifest.json from
  python/emoji/evaluate.py's frechet() (numpy), from scipy.linalg.sqrtm, and to 40 digits with
  mpmath (the rank-deficient sets, fewer vectors than dimensions, are where the float64 routes
  lose digits: the square roots of rounding-level eigenvalues).

  /usr/bin/python3 python/make_quality_fixtures.py --data DIR
DIR is the extracted ../shared/data/emoji/emoji-food-animals.tar.gz (images.npy, meta.json).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "emoji"))

import mpmath  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import torch  # noqa: E402

from classifier import load as load_classifier, to_input  # noqa: E402
from common import EmojiData  # noqa: E402
from evaluate import frechet  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "quality")
# Two training drawings in the twitter style (class = emoji * 3 + style).
DRAWINGS = ["red apple", "banana"]


def frechet_sqrtm(a, b):
    """The textbook formula with scipy's matrix square root (a second, independent route)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = scipy.linalg.sqrtm(s1 @ s2).real
    return float(((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def frechet_exact(a, b, digits=40):
    """A 40-digit value: the sum of the singular values of A B^T / sqrt((n-1)(m-1)) (centred
    feature matrices) is tr((S_a S_b)^1/2), taken via the eigenvalues of G G^T in mpmath."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mpmath.mp.dps = digits
    am = mpmath.matrix(a.tolist())
    bm = mpmath.matrix(b.tolist())
    n, m, d = a.shape[0], b.shape[0], a.shape[1]

    def centred(x, rows):
        mu = [mpmath.fsum(x[i, j] for i in range(rows)) / rows for j in range(d)]
        return mpmath.matrix([[x[i, j] - mu[j] for j in range(d)] for i in range(rows)]), mu

    ac, mua = centred(am, n)
    bc, mub = centred(bm, m)
    g = ac * bc.T / mpmath.sqrt((n - 1) * (m - 1))
    k = g * g.T if n <= m else g.T * g
    tr_sqrt = mpmath.fsum(mpmath.sqrt(max(e, 0)) for e in mpmath.eigsy(k, eigvals_only=True))
    tr_a = mpmath.fsum(v ** 2 for v in ac) / (n - 1)
    tr_b = mpmath.fsum(v ** 2 for v in bc) / (m - 1)
    mu2 = mpmath.fsum((x - y) ** 2 for x, y in zip(mua, mub))
    return float(mu2 + tr_a + tr_b - 2 * tr_sqrt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    data = EmojiData(a.data)
    names = [e["name"] for e in data.emoji]
    labels, imgs = [], []
    for name in DRAWINGS:
        c = names.index(name) * len(data.styles) + data.styles.index("twitter")
        i = int(np.nonzero(data.labels == c)[0][0])
        assert data.split[i] == "train", name
        labels.append(c)
        imgs.append(data.images[i])
    rng = np.random.default_rng(23)
    imgs.append(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8))
    yy, xx = np.mgrid[0:64, 0:64]
    imgs.append(np.stack([xx * 4, yy * 4, (xx + yy) * 2], -1).clip(0, 255).astype(np.uint8))
    labels += [-1, -1]
    images = np.stack(imgs)

    clf = load_classifier(os.path.join(ROOT, "models", "emoji", "classifier"))
    with torch.no_grad():
        x = to_input(images)
        logits = clf(x).numpy().astype(np.float32)
        features = clf.features(x).numpy().astype(np.float32)
    np.save(os.path.join(OUT, "images.npy"), images)
    np.save(os.path.join(OUT, "logits.npy"), logits)
    np.save(os.path.join(OUT, "features.npy"), features)

    # Frechet cases: dim below the set sizes (evaluate.py's covariance route), above them (the
    # Gram route), and the classifier's own 256-d features of the four images against a shifted
    # copy of themselves. Values are taken in f32 first: the engine reads f32.
    cases = {}

    def case(name, fa, fb):
        fa, fb = fa.astype(np.float32), fb.astype(np.float32)
        np.save(os.path.join(OUT, f"frechet_{name}_a.npy"), fa)
        np.save(os.path.join(OUT, f"frechet_{name}_b.npy"), fb)
        cases[name] = {"a": list(fa.shape), "b": list(fb.shape), "numpy": frechet(fa, fb),
                       "scipy_sqrtm": frechet_sqrtm(fa, fb), "exact_40_digits": frechet_exact(fa, fb)}

    mix = rng.normal(size=(8, 8))
    case("low_dim", rng.normal(size=(40, 8)) @ mix, rng.normal(size=(50, 8)) * 1.5 + 0.3)
    case("high_dim", rng.normal(size=(6, 16)), rng.normal(size=(9, 16)) @ rng.normal(size=(16, 16)) * 0.5 + 1)
    case("features", features, features[::-1] * 0.9 + 0.05)

    manifest = {
        "generator": "python/make_quality_fixtures.py",
        "classifier": "models/emoji/classifier (python/emoji/classifier.py, PyTorch f32)",
        "torch": torch.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
        "images": "2 Twemoji drawings (CC-BY 4.0, (c) Twitter, Inc. and other contributors), noise, gradient",
        "labels": labels,
        "label_names": [data.class_name(c) if c >= 0 else None for c in labels],
        "frechet": cases,
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(manifest["frechet"], indent=1))
    print("argmax:", logits.argmax(1).tolist(), "labels:", labels)


if __name__ == "__main__":
    main()
