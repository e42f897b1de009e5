"""A tessera classifier (models/emoji/classifier) as a FID feature network: its penultimate
features, from the project's own PyTorch classifier (python/emoji/classifier.py)."""
import importlib.util
import json
import os

import torch

from .images import EvalError

_CLASSIFIER_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "emoji", "classifier.py")


def load_classifier_module():
    """python/emoji/classifier.py, by path (python/emoji is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("tessera_emoji_classifier", _CLASSIFIER_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ClassifierFeatures(torch.nn.Module):
    """uint8 [B, 3, S, S] -> the classifier's float32 features [B, D], as QualityModel::features."""

    def __init__(self, directory):
        super().__init__()
        if not os.path.isfile(os.path.join(directory, "classifier.json")):
            raise EvalError(f"{directory}: no classifier.json (give a classifier directory such as "
                            "models/emoji/classifier)")
        mod = load_classifier_module()
        self.classifier = mod.load(directory)
        self.to_input = mod.to_input
        with open(os.path.join(directory, "classifier.json")) as f:
            self.image_size = int(json.load(f).get("image_size", 64))
        self.num_features = self.classifier.widths[-1]

    def train(self, mode=True):
        """Always in evaluation mode (BatchNorm with its running statistics), as the metric
        that holds it may be switched to training mode."""
        return super().train(False)

    def forward(self, x):
        if x.dtype != torch.uint8:
            raise EvalError("the classifier features take uint8 images")
        with torch.no_grad():
            return self.classifier.features(self.to_input(x.permute(0, 2, 3, 1)))
