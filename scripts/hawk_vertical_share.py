#!/usr/bin/env python3
"""Where Hawk's vertical proposals win (issue 43; Hawk §5.2 says vertical heads help most in
detailed regions). Reads the files of one `tessera generate --method hawk` run:
--tokens-out (the grids) and --heatmap-out (cells magenta where a vertical head's cached
proposal was accepted, dark where the target sampled the token, other colours where a
horizontal proposal was accepted). Prints the vertical share of accepted drafts by image row, by
column, and in flat cells (the token equals all its 4-neighbours: background) against detailed
ones (it differs from at least two of them).

  tessera generate --class 1 -n 32 --method hawk --tokens-out t.npy --heatmap-out h.png -q
  python3 scripts/hawk_vertical_share.py t.npy h.png
"""
import struct
import sys
import zlib
from pathlib import Path

import numpy as np


def read_png_rgb(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour == 2, f"{path}: 8-bit RGB expected"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 3 * w
    out = np.zeros((h, stride), np.int32)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        f, row = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        row = row.astype(np.int32)
        cur = np.zeros(stride, np.int32)
        for x in range(stride):
            a = cur[x - 3] if x >= 3 else 0
            b, c = prev[x], (prev[x - 3] if x >= 3 else 0)
            p = {0: 0, 1: a, 2: b, 3: (a + b) // 2}.get(f)
            if f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (row[x] + p) & 255
        out[y], prev = cur, cur
    return out.reshape(h, w, 3)


def main():
    tokens = np.load(sys.argv[1])
    tokens = tokens.reshape(tokens.shape[0], -1)
    stem = Path(sys.argv[2])
    n, grid = tokens.shape[0], int(round(tokens.shape[1] ** 0.5))
    vert = np.zeros((grid, grid)); acc = np.zeros((grid, grid))
    flat = np.zeros(2); flat_acc = np.zeros(2)  # [flat, detailed]
    for i in range(n):
        png = stem.with_name(f"{stem.stem}_{i:04d}{stem.suffix}") if n > 1 else stem
        px = read_png_rgb(png)
        cell = px.shape[0] // grid
        g = tokens[i].reshape(grid, grid)
        for r in range(grid):
            for c in range(grid):
                rgb = tuple(px[r * cell + cell // 2, c * cell + cell // 2])
                if rgb == (30, 30, 30):
                    continue  # the target sampled it
                v = rgb == (230, 40, 200)
                acc[r, c] += 1; vert[r, c] += v
                nb = [g[rr, cc] for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                      if 0 <= rr < grid and 0 <= cc < grid]
                differ = sum(t != g[r, c] for t in nb)
                k = 0 if differ == 0 else 1 if differ >= 2 else None
                if k is not None:
                    flat_acc[k] += 1; flat[k] += v
    share = lambda v, a: v.sum() / max(a.sum(), 1)
    print(f"{n} images, {int(acc.sum())} accepted drafts, vertical share {share(vert, acc):.3f}")
    print("by image row (top to bottom):",
          " ".join(f"{share(vert[r], acc[r]):.2f}" for r in range(grid)))
    print("by column (left to right):   ",
          " ".join(f"{share(vert[:, c], acc[:, c]):.2f}" for c in range(grid)))
    for k, name in enumerate(("flat (equal to all 4-neighbours)", "detailed (differs from >= 2)")):
        print(f"{name}: {int(flat_acc[k])} accepted drafts, vertical share "
              f"{flat[k] / max(flat_acc[k], 1):.3f}")


if __name__ == "__main__":
    main()
