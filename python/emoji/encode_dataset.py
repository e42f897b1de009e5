#!/usr/bin/env python3
"""Encode every dataset image with the trained VQ: OUT/tokens.npy int16 [N, 256] (raster order)."""
import argparse

import numpy as np
import torch

from common import EmojiData
from tessera_ref.atomic_io import atomic_write
from tessera_ref.llamagen import VQArgs, VQModel


def load_vq(path):
    """The trained VQ (train_vq.py checkpoint: official layout under "model", plus its args)."""
    ck = torch.load(path)
    va = ck["args"]
    model = VQModel(VQArgs(codebook_size=va["codebook_size"], codebook_embed_dim=va["embed_dim"],
                           z_channels=va["z_channels"], ch=va["ch"], ch_mult=va["ch_mult"],
                           num_res_blocks=va["num_res_blocks"]))
    model.load_state_dict(ck["model"])
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--vq", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    model = load_vq(a.vq)
    data = EmojiData(a.data)
    out = []
    with torch.no_grad():
        for i in range(0, len(data.images), 128):
            out.append(model.encode_indices(data.tensor(np.arange(i, min(i + 128, len(data.images))))))
    tok = torch.cat(out).numpy().astype(np.int16)
    with atomic_write(a.out if a.out.endswith(".npy") else a.out + ".npy") as f:  # np.save's name
        np.save(f, tok)
    print(f"{tok.shape} tokens, {len(np.unique(tok))} distinct codes -> {a.out}")


if __name__ == "__main__":
    main()
