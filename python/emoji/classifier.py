"""The emoji classifier used to measure the default model (issue 4): a small CNN over 64x64 RGB
(average-pooled to 32x32),
one output per class (emoji x style), with a 256-d penultimate feature for Frechet distances.
Stored as classifier.safetensors + classifier.json (num_classes, widths)."""
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.safetensors_io import read_safetensors, write_safetensors  # noqa: E402


class EmojiClassifier(nn.Module):
    def __init__(self, num_classes, widths=(32, 64, 128, 256)):
        super().__init__()
        self.widths = list(widths)
        # 64x64 is pooled to 32x32 first: emoji stay recognisable and training is 4x cheaper.
        layers, c = [nn.AvgPool2d(2)], 3
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                       nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c = w
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c, num_classes)
        self.num_classes = num_classes

    def features(self, x):
        """x: float [B, 3, 64, 64] in [-1, 1] -> [B, 256]."""
        return self.body(x).mean(dim=(2, 3))

    def forward(self, x):
        return self.head(self.features(x))


def to_input(pixels_uint8_nhwc):
    x = torch.as_tensor(pixels_uint8_nhwc).float().permute(0, 3, 1, 2)
    return x / 127.5 - 1.0


def save(model, directory):
    os.makedirs(directory, exist_ok=True)
    sd = model.state_dict()
    write_safetensors(os.path.join(directory, "classifier.safetensors"),
                      [(k, v.to(torch.float16) if v.is_floating_point() else v.float().to(torch.float16))
                       for k, v in sd.items() if not k.endswith("num_batches_tracked")])
    with atomic_write(os.path.join(directory, "classifier.json"), "w") as f:
        json.dump({"num_classes": model.num_classes, "widths": model.widths}, f)


def load(directory):
    cfg = json.load(open(os.path.join(directory, "classifier.json")))
    model = EmojiClassifier(cfg["num_classes"], cfg["widths"])
    sd = {k: v.float() for k, v in read_safetensors(os.path.join(directory, "classifier.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    bad = [k for k in missing if not k.endswith("num_batches_tracked")] + list(unexpected)
    if bad:
        raise ValueError(f"{directory}: classifier tensors do not match the architecture: {bad[:5]}")
    model.eval()
    return model
