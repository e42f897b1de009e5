#!/usr/bin/env python3
"""Deterministically builds the random-weight Medusa heads of the tests, written by the PyTorch
reference (python/tessera_ref/medusa.py, Medusa's parameter names), plus a golden:

  tests/fixtures/spec/micro_medusa/           3 heads for spec/micro_target (dim 32, vocab 4)
  tests/fixtures/spec/tiny_medusa/            3 heads for llamagen/c2i_f32 (dim 64, vocab 256)
  tests/fixtures/spec/tiny_medusa_per_head/   2 heads with their own lm_head (Medusa-1's format)
  tests/fixtures/spec/tiny_medusa_golden/     target features of a random sequence (class 3) and
                                              every head's logits on them (shared and per-head,
                                              and the Hawk heads' vertical ones)
  tests/fixtures/spec/micro_hawk/             Hawk: 2 horizontal + 1 vertical head for micro_target
  tests/fixtures/spec/tiny_hawk/              Hawk: 2 horizontal + 2 vertical heads for c2i_f32

  /opt/tessera-eval-venv/bin/python python/make_medusa_fixtures.py
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tessera_ref.llamagen import load_tessera_gpt  # noqa: E402
from tessera_ref.medusa import HawkHeads, MedusaHeads, write_tessera, write_tessera_hawk  # noqa: E402

SPEC = os.path.join(ROOT, "tests", "fixtures", "spec")
TINY_TARGET = os.path.join(ROOT, "tests", "fixtures", "llamagen", "c2i_f32")
MICRO_TARGET = os.path.join(SPEC, "micro_target")
SEED = 20261128


def random_heads(target_dir, num_heads, seed, scale, per_head=False, vertical=0):
    gpt = load_tessera_gpt(target_dir)
    c = gpt.config
    if vertical:
        heads = HawkHeads(c.dim, num_heads, vertical, gpt.grid_size, c.vocab_size)
    else:
        heads = MedusaHeads(c.dim, num_heads, c.vocab_size, per_head_lm_head=per_head)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(heads.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * scale / max(p.shape[-1], 1) ** 0.5)
    return gpt, heads


def write(heads, out):
    if os.path.isdir(out):
        shutil.rmtree(out)
    (write_tessera_hawk if isinstance(heads, HawkHeads) else write_tessera)(heads, out, "f32")


@torch.no_grad()
def golden(gpt, shared, per_head, hawk, label, n_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, gpt.vocab_size, (1, n_tokens), generator=g)
    h = torch.cat([gpt.cls_embedding.embedding_table(torch.tensor([label]))[:, None],
                   gpt.tok_embeddings(tokens[:, :-1])], 1)
    fc = gpt.freqs_cis[:h.shape[1]]
    for layer in gpt.layers:
        h = layer(h, fc, None, "causal")
    feats = gpt.norm(h)[0]  # the row of position t predicts token t
    return {"tokens": tokens[0].numpy().astype(np.int32), "target_features": feats.numpy(),
            "logits": shared(feats, gpt.output).numpy(),            # [K, n, V]
            "logits_per_head": per_head(feats, gpt.output).numpy(),
            "hawk_horizontal_logits": hawk(feats, gpt.output).numpy(),  # [K, n, V]
            "hawk_vertical_logits": hawk.vertical(feats, gpt.output).numpy()}  # [D, n, V]


def main():
    torch.set_num_threads(1)
    # micro: logits of a useful spread (the heads' ranks must differ from the target's).
    _, micro = random_heads(MICRO_TARGET, 3, SEED, scale=3.0)
    write(micro, os.path.join(SPEC, "micro_medusa"))
    gpt, tiny = random_heads(TINY_TARGET, 3, SEED + 1, scale=1.0)
    write(tiny, os.path.join(SPEC, "tiny_medusa"))
    _, per_head = random_heads(TINY_TARGET, 2, SEED + 2, scale=1.0, per_head=True)
    write(per_head, os.path.join(SPEC, "tiny_medusa_per_head"))
    _, micro_hawk = random_heads(MICRO_TARGET, 2, SEED + 4, scale=3.0, vertical=1)
    write(micro_hawk, os.path.join(SPEC, "micro_hawk"))
    _, hawk = random_heads(TINY_TARGET, 2, SEED + 5, scale=1.0, vertical=2)
    write(hawk, os.path.join(SPEC, "tiny_hawk"))
    gold = golden(gpt, tiny, per_head, hawk, label=3, n_tokens=gpt.block_size, seed=SEED + 3)
    out = os.path.join(SPEC, "tiny_medusa_golden")
    os.makedirs(out, exist_ok=True)
    for k, v in gold.items():
        np.save(os.path.join(out, k + ".npy"), v)
    print("logits std", float(gold["logits"].std()), "per-head logits std", float(gold["logits_per_head"].std()))


if __name__ == "__main__":
    main()
