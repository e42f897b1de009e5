"""FID with torchmetrics' FrechetInceptionDistance.

The metric keeps float64 running sums of each set's features (sum and sum of outer products) and
computes ||mu_r - mu_g||^2 + tr S_r + tr S_g - 2 tr (S_r S_g)^1/2 (Heusel et al. 2017, eq. 6)
with unbiased covariances. Reference statistics (mean, covariance, n) are loaded into the real
set's sums, so a folder and a stats file go through the same computation.
"""
import os

import numpy as np
import torch

from .images import EvalError, image_paths, load_images


def _torchmetrics_fid():
    try:
        from torchmetrics.image.fid import FrechetInceptionDistance
    except ImportError as e:
        raise EvalError(f"FID needs torchmetrics ({e}); install it with scripts/setup-deps.sh "
                        "(docs/quality.md)") from None
    return FrechetInceptionDistance


class FeatureNetwork:
    """Which network embeds the images: torchmetrics' default InceptionV3 (torch-fidelity's port
    of the TensorFlow FID network, 2048-d pool features; any input size, resized to 299x299
    inside), or a tessera classifier directory (models/emoji/classifier: 256-d penultimate
    features of 64x64 images)."""

    def __init__(self, classifier_dir=None):
        self.classifier_dir = classifier_dir
        if classifier_dir is None:
            self.name, self.module, self.size = "inception-v3-compat/2048", None, None
        else:
            from .classifier_features import ClassifierFeatures
            self.module = ClassifierFeatures(classifier_dir)
            self.name = f"classifier:{os.path.abspath(classifier_dir)}/{self.module.num_features}"
            self.size = self.module.image_size

    def metric(self):
        fid_cls = _torchmetrics_fid()
        try:
            m = fid_cls(feature=2048 if self.module is None else self.module)
        except ModuleNotFoundError:
            raise EvalError("the InceptionV3 features need torch-fidelity: apt-get install "
                            "python3-torchvision, then pip install torch-fidelity==0.3.0 into the venv "
                            "(docs/quality.md); or give --classifier DIR") from None
        m.eval()
        return m


def add_images(metric, pixels, real, batch=50):
    """Feeds uint8 [n, H, W, 3] images to the metric's real or generated set."""
    with torch.no_grad():
        for i in range(0, len(pixels), batch):
            x = torch.from_numpy(np.ascontiguousarray(pixels[i:i + batch])).permute(0, 3, 1, 2)
            metric.update(x.contiguous(), real=real)


def add_folder(metric, folder, net, real, batch=50):
    paths = image_paths(folder)
    for i in range(0, len(paths), batch):
        add_images(metric, load_images(paths[i:i + batch], net.size), real, batch)
    return len(paths)


def set_real_statistics(metric, mu, sigma, n):
    """Makes the metric's real set the Gaussian (mu, sigma) of n images: the sums it would have
    accumulated, sum = n mu and sum of x x^T = (n - 1) sigma + n mu mu^T."""
    mu = torch.as_tensor(np.asarray(mu, np.float64))
    sigma = torch.as_tensor(np.asarray(sigma, np.float64))
    d = metric.real_features_sum.shape[0]
    if mu.shape != (d,) or sigma.shape != (d, d):
        raise EvalError(f"reference statistics are {tuple(mu.shape)} and {tuple(sigma.shape)}; "
                        f"the feature network gives {d}-d features")
    metric.real_features_sum = n * mu
    metric.real_features_cov_sum = (n - 1) * sigma + n * torch.outer(mu, mu)
    metric.real_features_num_samples = torch.tensor(int(n))


def real_statistics(metric):
    """(mu, sigma, n) of the metric's real set, as compute() derives them."""
    n = int(metric.real_features_num_samples)
    if n < 2:
        raise EvalError(f"reference statistics need at least 2 images (got {n})")
    mu = metric.real_features_sum / n
    sigma = (metric.real_features_cov_sum - n * torch.outer(mu, mu)) / (n - 1)
    return mu.numpy(), sigma.numpy(), n


def save_statistics(path, mu, sigma, n, feature):
    """The .npz reference format: mu [d], sigma [d, d] (pytorch-fid's and clean-fid's names),
    plus n and the feature network's name (checked when the file is used)."""
    np.savez(path, mu=mu, sigma=sigma, n=np.int64(n), feature=np.str_(feature))


def load_statistics(path, net):
    try:
        z = np.load(path)
    except (OSError, ValueError) as e:
        raise EvalError(f"{path}: cannot read reference statistics ({e})") from None
    if "mu" not in z or "sigma" not in z:
        raise EvalError(f"{path}: no 'mu' and 'sigma' arrays (a reference statistics .npz)")
    if "feature" in z and str(z["feature"]) != net.name:
        raise EvalError(f"{path}: statistics of {z['feature']}, but the features are {net.name}")
    # Without n (other tools' files) any n >= 2 recovers mu and sigma; the FID does not depend on it.
    n = int(z["n"]) if "n" in z else 2
    return z["mu"], z["sigma"], n


def fid(generated, reference, net, batch=50):
    """FID of a folder of images against a folder or a stats .npz; returns (fid, n_gen, n_ref)."""
    metric = net.metric()
    if os.path.isdir(reference):
        n_ref = add_folder(metric, reference, net, real=True, batch=batch)
    elif os.path.isfile(reference):
        mu, sigma, n_ref = load_statistics(reference, net)
        set_real_statistics(metric, mu, sigma, n_ref)
    else:
        raise EvalError(f"{reference}: no such folder or statistics file")
    n_gen = add_folder(metric, generated, net, real=False, batch=batch)
    if n_gen < 2:
        raise EvalError(f"{generated}: FID needs at least 2 images (got {n_gen})")
    return float(metric.compute()), n_gen, n_ref


def folder_statistics(folder, net, batch=50):
    metric = net.metric()
    add_folder(metric, folder, net, real=True, batch=batch)
    return real_statistics(metric)
