#!/usr/bin/env python3
"""Build the emoji dataset from npm packages (issue 4): 64x64 RGB on white, one image per
(emoji, style), with name, aliases, category and style, and a held-out split.

Sources (installed by scripts/fetch-emoji-data.sh into DIR/node_modules):
  emoji-datasource-twitter  Twemoji 64x64 PNGs (graphics CC-BY 4.0)
  emoji-datasource-google   Noto Emoji 64x64 PNGs (Apache 2.0)
  openmoji                  OpenMoji SVGs (CC-BY-SA 4.0), rasterised with Debian's rsvg-convert

Kept: emoji that all three sets draw, minus the 'Flags' and 'Component' categories and skin-tone
variants (the base emoji only); with --categories, only the emoji of the listed categories.
Output (DIR/out): images.npy uint8 [N, 64, 64, 3] and meta.json.

Usage: /usr/bin/python3 python/emoji/build_dataset.py --npm DATA_DIR --out OUT_DIR
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # python/
from tessera_ref.atomic_io import atomic_write  # noqa: E402

STYLES = ["twitter", "google", "openmoji"]
EXCLUDED_CATEGORIES = {"Flags", "Component"}
SIZE = 64


def on_white(img):
    """RGBA/RGB/P -> RGB composited on white (alpha blending in 8-bit, as PIL does)."""
    img = img.convert("RGBA")
    if img.size != (SIZE, SIZE):
        img = img.resize((SIZE, SIZE), Image.LANCZOS)
    bg = Image.new("RGBA", img.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(bg, img).convert("RGB"), dtype=np.uint8)


def rasterise_svg(svg_path, tmp_dir):
    out = os.path.join(tmp_dir, "r.png")
    subprocess.run(["rsvg-convert", "-w", str(SIZE), "-h", str(SIZE), "-o", out, svg_path],
                   check=True, capture_output=True)
    with Image.open(out) as im:
        return on_white(im)


def held_out(hexcode, style, fraction):
    """Deterministic split: hash of (hexcode, style); about `fraction` of images held out."""
    h = int(hashlib.sha256(f"{hexcode}/{style}".encode()).hexdigest()[:8], 16)
    return h < fraction * 0x100000000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npm", required=True, help="directory holding node_modules/ with the three packages")
    ap.add_argument("--out", required=True)
    ap.add_argument("--held-out", type=float, default=0.05, help="fraction of images held out")
    ap.add_argument("--categories", help="comma-separated emoji-datasource categories to keep "
                    "(e.g. 'Food & Drink,Animals & Nature'); default: all but Flags and Component")
    args = ap.parse_args()
    nm = os.path.join(args.npm, "node_modules")
    ds = json.load(open(os.path.join(nm, "emoji-datasource-twitter", "emoji.json")))
    om = {e["hexcode"]: e for e in json.load(open(os.path.join(nm, "openmoji", "data", "openmoji.json")))}
    versions = {p: json.load(open(os.path.join(nm, p, "package.json")))["version"]
                for p in ("emoji-datasource-twitter", "emoji-datasource-google", "openmoji")}

    known = {e["category"] for e in ds} - EXCLUDED_CATEGORIES
    keep = known
    if args.categories:
        keep = {c.strip() for c in args.categories.split(",")}
        if keep - known:
            sys.exit(f"error: unknown categories {sorted(keep - known)}; known: {sorted(known)}")
    emoji = []
    for e in sorted(ds, key=lambda e: e["sort_order"]):
        if e["category"] not in keep or not (e["has_img_twitter"] and e["has_img_google"]):
            continue
        o = om.get(e["unified"]) or om.get(e["non_qualified"] or "")
        svg = o and os.path.join(nm, "openmoji", "color", "svg", o["hexcode"] + ".svg")
        if not o or not os.path.exists(svg):
            continue
        name = o["annotation"].strip().lower()          # CLDR short name: 'red apple'
        aliases = sorted({e["name"].lower()} | {s.replace("_", " ") for s in e["short_names"]} - {name})
        emoji.append({"hexcode": e["unified"], "name": name, "aliases": aliases,
                      "category": e["category"], "subcategory": e["subcategory"],
                      "files": {"twitter": os.path.join(nm, "emoji-datasource-twitter", "img", "twitter", "64", e["image"]),
                                "google": os.path.join(nm, "emoji-datasource-google", "img", "google", "64", e["image"]),
                                "openmoji": svg}})
    names = [e["name"] for e in emoji]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"error: duplicate emoji names {sorted(dup)}")

    os.makedirs(args.out, exist_ok=True)
    images, meta = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, e in enumerate(emoji):
            for style in STYLES:
                f = e["files"][style]
                if style == "openmoji":
                    px = rasterise_svg(f, tmp)
                else:
                    with Image.open(f) as im:
                        px = on_white(im)
                images.append(px)
                meta.append({"emoji": i, "style": style,
                             "split": "held_out" if held_out(e["hexcode"], style, args.held_out) else "train"})
            if (i + 1) % 200 == 0:
                print(f"{i + 1}/{len(emoji)} emoji", file=sys.stderr)
    for e in emoji:
        del e["files"]
    with atomic_write(os.path.join(args.out, "images.npy")) as f:
        np.save(f, np.stack(images))
    counts = {s: sum(1 for m in meta if m["split"] == s) for s in ("train", "held_out")}
    with atomic_write(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump({"styles": STYLES, "size": SIZE, "sources": versions, "categories": sorted(keep),
                   "emoji": emoji, "images": meta, "counts": counts}, f, indent=1)
    print(f"{len(emoji)} emoji x {len(STYLES)} styles = {len(meta)} images "
          f"({counts['train']} train, {counts['held_out']} held out) -> {args.out}")


if __name__ == "__main__":
    main()
