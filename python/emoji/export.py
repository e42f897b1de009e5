#!/usr/bin/env python3
"""Export trained emoji checkpoints to tessera model directories with the project's converter
(tools/convert_llamagen.py, the same path official LlamaGen checkpoints take), f16 weights:

  OUT/target/  config.json, gpt.safetensors, vq.safetensors, classes.json
  OUT/draft-data/  config.json, gpt.safetensors, classes.json (the draft trained on the data;
                   the shipped OUT/draft/ is distilled from the target by distill_draft.py)
"""
import argparse
import json
import os
import sys

import torch

from common import EmojiData

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import convert_llamagen  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402


def classes_json(data):
    """One entry per class id (emoji * n_styles + style); aliases keyed by name."""
    classes = [{"name": e["name"], "style": s, "category": e["category"]}
               for e in data.emoji for s in data.styles]
    held_out = sorted(int(c) for c in data.labels[data.indices("held_out")])
    # Each emoji's characters (its hexcode, e.g. 1F43B-200D-2744-FE0F), so that a prompt may be the
    # emoji itself: tessera generate "🍎".
    chars = {e["name"]: "".join(chr(int(h, 16)) for h in e["hexcode"].split("-")) for e in data.emoji}
    return {"format": "tessera-classes-1", "styles": data.styles, "default_style": data.styles[0],
            "classes": classes, "aliases": {e["name"]: e["aliases"] for e in data.emoji if e["aliases"]},
            "held_out_classes": held_out, "emoji": chars}


# The target's recommended sampling settings, written to its config.json "sampling" (tessera
# generate uses them for flags not given). With one drawing per class the model has memorised its
# classes; guidance (LlamaGen's cfg 4) pushes it off them: MODEL_CARD.md has both measurements.
TARGET_SAMPLING = {"cfg": 1.0}


def convert_gpt(ckpt, out, num_classes, dtype, vq=None):
    """A training checkpoint (official-layout state dict under "model", the run's "args") to a
    tessera model directory, through the project's converter."""
    a = torch.load(ckpt)["args"]
    argv = ["--gpt", ckpt, "--out", out, "--gpt-model", "custom", "--dim", str(a["dim"]),
            "--n-layer", str(a["n_layer"]), "--n-head", str(a["n_head"]), "--image-size", "64",
            "--downsample", "4", "--num-classes", str(num_classes), "--vocab-size", str(a["vocab_size"]),
            "--dtype", dtype]
    if vq:
        argv += ["--vq", vq, "--vq-model", "custom", "--vq-dtype", dtype]
    if convert_llamagen.main(argv) != 0:
        sys.exit(f"error: converting {ckpt} failed")


def export_gpt(ckpt, vq, out, data, dtype, sampling=None, companions=None):
    convert_gpt(ckpt, out, data.num_classes, dtype, vq)
    if sampling or companions:
        path = os.path.join(out, "config.json")
        config = json.load(open(path))
        if sampling:
            config["sampling"] = sampling
        if companions:  # so that -m DIR runs with the draft and classifier the default model uses
            config["companions"] = companions
        with atomic_write(path, "w") as f:  # never a torn config.json: the model stays loadable
            json.dump(config, f, indent=2)
            f.write("\n")
    with atomic_write(os.path.join(out, "classes.json"), "w") as f:
        json.dump(classes_json(data), f, indent=None, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", required=True, help="directory with vq.pt, target.pt, draft.pt")
    ap.add_argument("--out", required=True, help="e.g. models/emoji")
    ap.add_argument("--dtype", default="f16")
    a = ap.parse_args()
    data = EmojiData(a.data)
    export_gpt(os.path.join(a.runs, "target.pt"), os.path.join(a.runs, "vq.pt"), os.path.join(a.out, "target"), data, a.dtype,
               TARGET_SAMPLING, {"draft": "../draft", "classifier": "../classifier"})
    if os.path.exists(os.path.join(a.runs, "draft.pt")):
        export_gpt(os.path.join(a.runs, "draft.pt"), None, os.path.join(a.out, "draft-data"), data, a.dtype)


if __name__ == "__main__":
    main()
