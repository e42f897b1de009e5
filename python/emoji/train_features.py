#!/usr/bin/python3
"""Reference statistics of the emoji training set for the Frechet distance "to the training set"
(issue 23; docs/quality.md): the classifier's 256-d penultimate features of every image of the
training split (models/emoji/DATA.md: the split the tokenizer, the GPTs and the classifier
trained on), summarised as a Gaussian, written to models/emoji/classifier/train_features.safetensors:

  mean F64[256], cov F64[256, 256] (unbiased, np.cov), n I64[1] (images)

and the goldens of tests/test_quality.cpp (QualityTrainStatistics) under tests/fixtures/quality/:
held_out_features.npy (f32, the held-out split's features) and train_frechet.json, the Frechet
distances of those and of the fixture images (features.npy, images.npy) to the training
statistics, computed here with numpy from (mean, cov) as evaluate.py's frechet() does.

  /usr/bin/python3 python/emoji/train_features.py --data DIR
DIR is the extracted ../shared/data/emoji/emoji-food-animals.tar.gz (images.npy, meta.json).
"""
import argparse
import json
import os
import sys

import numpy as np
import scipy.linalg
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from classifier import load as load_classifier, to_input  # noqa: E402
from common import EmojiData  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.safetensors_io import write_safetensors  # noqa: E402

CLASSIFIER = os.path.join(ROOT, "models", "emoji", "classifier")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "quality")


def features(clf, pixels, batch=64):
    with torch.no_grad():
        return np.concatenate([clf.features(to_input(pixels[i:i + batch])).numpy()
                               for i in range(0, len(pixels), batch)]).astype(np.float32)


def frechet_to_stats(f, mu, cov):
    """Frechet distance of feature set f [n, d] to the Gaussian (mu, cov): evaluate.py's route,
    tr((S cov)^1/2) from the eigenvalues of cov^1/2 S cov^1/2."""
    f = np.asarray(f, np.float64)
    s = np.cov(f, rowvar=False)
    w, v = np.linalg.eigh(cov)
    r = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = r @ s @ r
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()
    return float(((f.mean(0) - mu) ** 2).sum() + np.trace(s) + np.trace(cov) - 2 * tr_sqrt)


def frechet_to_stats_sqrtm(f, mu, cov):
    """The textbook formula with scipy's matrix square root (a second route)."""
    f = np.asarray(f, np.float64)
    s = np.cov(f, rowvar=False)
    return float(((f.mean(0) - mu) ** 2).sum() + np.trace(s) + np.trace(cov)
                 - 2 * np.trace(scipy.linalg.sqrtm(s @ cov).real))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    data = EmojiData(a.data)
    clf = load_classifier(CLASSIFIER)
    train = data.indices("train")
    f_train = features(clf, data.images[train]).astype(np.float64)
    mu, cov = f_train.mean(0), np.cov(f_train, rowvar=False)
    n = len(train)
    write_safetensors(os.path.join(CLASSIFIER, "train_features.safetensors"),
                      [("mean", torch.from_numpy(mu)), ("cov", torch.from_numpy(np.ascontiguousarray(cov))),
                       ("n", torch.tensor([n], dtype=torch.int64))])

    held = features(clf, data.images[data.indices("held_out")])
    np.save(os.path.join(FIXTURES, "held_out_features.npy"), held)
    fixture_features = np.load(os.path.join(FIXTURES, "features.npy"))
    golden = {
        "generator": "python/emoji/train_features.py",
        "statistics": "models/emoji/classifier/train_features.safetensors",
        "train_n": n, "feature_dim": int(mu.shape[0]),
        "torch": torch.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
        "held_out": {"features": "held_out_features.npy", "n": int(len(held)),
                     "numpy": frechet_to_stats(held, mu, cov), "scipy_sqrtm": frechet_to_stats_sqrtm(held, mu, cov)},
        "fixture_images": {"features": "features.npy", "images": "images.npy", "n": int(len(fixture_features)),
                           "numpy": frechet_to_stats(fixture_features, mu, cov),
                           "scipy_sqrtm": frechet_to_stats_sqrtm(fixture_features, mu, cov)},
    }
    with atomic_write(os.path.join(FIXTURES, "train_frechet.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(json.dumps(golden, indent=1))


if __name__ == "__main__":
    main()
