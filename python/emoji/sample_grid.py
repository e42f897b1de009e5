#!/usr/bin/env python3
"""The README's sample sheet: for each prompt, the training drawing, then images generated with
vanilla sampling and with a speculative method (same seeds), written by the tessera CLI.
Usage: sample_grid.py --tessera build/tessera --out docs/images/emoji_samples.png
         [--method sd] [--prompts "red apple" "pizza" ...] [--style twitter] [--seeds 0 1]"""
import argparse
import os
import subprocess
import tempfile

from PIL import Image, ImageDraw

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PROMPTS = ["red apple", "banana", "pizza", "strawberry", "cat face", "dog face", "frog",
                   "penguin"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", default="sd")
    ap.add_argument("--prompts", nargs="+", default=DEFAULT_PROMPTS)
    ap.add_argument("--styles", nargs="+", default=["twitter", "google", "openmoji"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    model = os.path.join(ROOT, "models", "emoji", "target")
    draft = os.path.join(ROOT, "models", "emoji", "draft")
    cols = [("vanilla", s) for s in a.seeds] + [(a.method, s) for s in a.seeds]
    tile, pad, label_h = 64, 4, 14
    rows = [(p, st) for p in a.prompts for st in a.styles]
    W = pad + len(cols) * (tile + pad) + 150
    H = label_h + pad + len(rows) * (tile + pad)
    sheet = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(sheet)
    for j, (m, s) in enumerate(cols):
        draw.text((pad + j * (tile + pad), 2), f"{m} s{s}", fill="black")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (prompt, style) in enumerate(rows):
            y = label_h + pad + i * (tile + pad)
            for j, (m, s) in enumerate(cols):
                out = os.path.join(tmp, "x.png")
                cmd = [a.tessera, "generate", "-m", model, prompt, "--style", style, "-s", str(s), "-o", out, "-q"]
                if m != "vanilla":
                    cmd += ["--method", m, "--draft", draft]
                subprocess.run(cmd, check=True)
                with Image.open(out) as im:
                    sheet.paste(im.convert("RGB"), (pad + j * (tile + pad), y))
            draw.text((pad + len(cols) * (tile + pad) + 4, y + tile // 2 - 6), f"{prompt} ({style})", fill="black")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    sheet.save(a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
