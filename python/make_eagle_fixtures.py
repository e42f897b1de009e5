#!/usr/bin/python3
"""Deterministically builds the random-weight EAGLE drafters of the tests, each written in
LANTERN's layout (config.json with Hugging Face Llama keys + pytorch_model.bin, the layout of
jadohu/llamagen_drafter) and converted with tools/convert_eagle.py, plus a golden from the
PyTorch reference (python/tessera_ref/eagle.py):

  tests/fixtures/spec/micro_eagle/     drafter for spec/micro_target (dim 32, vocab 4, grid 2)
  tests/fixtures/spec/tiny_eagle/      drafter for llamagen/c2i_f32 (dim 64, vocab 256, grid 4)
  tests/fixtures/spec/t2i_eagle/       drafter for llamagen/t2i_f32 (its 8-row caption prefix: 7
                                       prefix pairs, LANTERN's 119 for 120)
  tests/fixtures/spec/tiny_eagle_golden/
      tokens.npy [L] (a class-3 sequence), target_features.npy [L, 64] (the target's post-norm
      hidden states f_0..f_{L-1} at sequence positions 0..L-1, position 0 the class token),
      logits.npy [L, 256] (the drafter's logits for the pairs (f_k, x_k), k = 0..L-1, through the
      target's LM head), predicted.npy [L, 64] (its predicted features)

  /opt/tessera-eval-venv/bin/python python/make_eagle_fixtures.py
"""
import io
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import convert_eagle  # noqa: E402
from tessera_ref.eagle import EagleArgs, EagleDrafter  # noqa: E402
from tessera_ref.llamagen import load_tessera_gpt  # noqa: E402

SPEC = os.path.join(ROOT, "tests", "fixtures", "spec")
TINY_TARGET = os.path.join(ROOT, "tests", "fixtures", "llamagen", "c2i_f32")
T2I_TARGET = os.path.join(ROOT, "tests", "fixtures", "llamagen", "t2i_f32")
MICRO_TARGET = os.path.join(SPEC, "micro_target")
SEED = 20261127


def random_drafter(target_dir, n_head, ffn_dim, seed, scale):
    gpt = load_tessera_gpt(target_dir)
    c = gpt.config
    a = EagleArgs(dim=c.dim, n_head=n_head, n_kv_head=n_head, ffn_dim=ffn_dim, vocab_size=c.vocab_size,
                  norm_eps=1e-6, rope_base=c.rope_base, grid=gpt.grid_size, prefix_len=c.cls_token_num - 1)
    d = EagleDrafter(a)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(d.named_parameters()):
            if name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * scale / max(p.shape[-1], 1) ** 0.5)
    return gpt, d


def write_lantern(d, path):
    """The drafter as LANTERN ships one: config.json + pytorch_model.bin."""
    os.makedirs(path, exist_ok=True)
    a = d.args
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.dim,
           "intermediate_size": a.ffn_dim, "num_attention_heads": a.n_head, "num_key_value_heads": a.n_kv_head,
           "num_hidden_layers": 1, "vocab_size": a.vocab_size, "rms_norm_eps": a.norm_eps,
           "rope_theta": a.rope_base, "hidden_act": "silu", "input_type": "c2i"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    buf = io.BytesIO()
    torch.save({k: v.clone() for k, v in d.state_dict().items()}, buf)
    with open(os.path.join(path, "pytorch_model.bin"), "wb") as f:
        f.write(buf.getvalue())


def convert(d, target_dir, out):
    with tempfile.TemporaryDirectory() as tmp:
        write_lantern(d, tmp)
        if os.path.isdir(out):
            shutil.rmtree(out)
        rc = convert_eagle.main(["--drafter", tmp, "--target", target_dir, "--out", out, "--dtype", "f32"])
        assert rc == 0


@torch.no_grad()
def golden(gpt, d, label, n_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, gpt.vocab_size, (1, n_tokens), generator=g)
    h = torch.cat([gpt.cls_embedding.embedding_table(torch.tensor([label]))[:, None],
                   gpt.tok_embeddings(tokens[:, :-1])], 1)
    fc = gpt.freqs_cis[:h.shape[1]]
    for layer in gpt.layers:
        h = layer(h, fc, None, "causal")
    feats = gpt.norm(h)  # f_0 .. f_{L-1}
    pos = torch.arange(d.args.prefix_len, d.args.prefix_len + n_tokens)
    pred, _ = d(feats, tokens, pos)
    logits = gpt.output(pred)
    return {"tokens": tokens[0].numpy().astype(np.int32), "target_features": feats[0].numpy(),
            "predicted": pred[0].numpy(), "logits": logits[0].numpy()}


def main():
    torch.set_num_threads(1)
    # micro: logits of a useful spread (the drafter's q must differ from the target's p).
    _, micro = random_drafter(MICRO_TARGET, n_head=2, ffn_dim=48, seed=SEED, scale=1.0)
    convert(micro, MICRO_TARGET, os.path.join(SPEC, "micro_eagle"))
    gpt, tiny = random_drafter(TINY_TARGET, n_head=4, ffn_dim=96, seed=SEED + 1, scale=1.0)
    convert(tiny, TINY_TARGET, os.path.join(SPEC, "tiny_eagle"))
    _, t2i = random_drafter(T2I_TARGET, n_head=4, ffn_dim=96, seed=SEED + 3, scale=1.0)
    convert(t2i, T2I_TARGET, os.path.join(SPEC, "t2i_eagle"))
    gold = golden(gpt, tiny, label=3, n_tokens=gpt.block_size, seed=SEED + 2)
    out = os.path.join(SPEC, "tiny_eagle_golden")
    os.makedirs(out, exist_ok=True)
    for k, v in gold.items():
        np.save(os.path.join(out, k + ".npy"), v)
    print("logits std", float(gold["logits"].std()), "predicted std", float(gold["predicted"].std()))


if __name__ == "__main__":
    main()
