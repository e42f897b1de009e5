#!/usr/bin/python3
"""Write a tessera T5 text-encoder directory (config.json, t5.safetensors, spiece.model) with random
weights of a real flan-T5 encoder's shapes: the stand-in for converted checkpoints in benchmarks
(same shapes, same FLOPs per token as tools/convert_t5.py's output of the real model).

  /usr/bin/python3 python/make_random_t5.py --size xl --out /tmp/t5xl_f32
  /usr/bin/python3 python/make_random_t5.py --size xl --dtype bf16 --out /tmp/t5xl_bf16
  /usr/bin/python3 python/make_random_t5.py --size base --out /tmp/t5base_f32

Sizes (the encoders of google/flan-t5-*): xl d_model 2048, d_kv 64, 32 heads, d_ff 5120, 24 layers
(~1.22e9 params: ~4.9 GB in f32); base 768/64/12/2048/12; small 512/64/8/1024/8; vocabulary 32128,
32 buckets, max distance 128, eps 1e-6. Linear weights are normal / sqrt(fan_in), embeddings and
the relative-position biases normal, norms 1, so the hidden states stay finite through every layer.
Tensors are generated and written one at a time (memory: the largest tensor, not the model).
Keep big directories out of the repository (/tmp).
"""
import argparse
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.safetensors_io import _TORCH_TO_ST, DTYPES, tensor_bytes  # noqa: E402

SIZES = {  # d_model, d_kv, num_heads, d_ff, num_layers
    "xl": (2048, 64, 32, 5120, 24),
    "base": (768, 64, 12, 2048, 12),
    "small": (512, 64, 8, 1024, 8),
}
SPIECE = os.path.join(HERE, "..", "tests", "fixtures", "t5", "hf", "spiece.model")


def t5_config(size):
    D, K, H, F, L = SIZES[size]
    return {"vocab_size": 32128, "d_model": D, "d_kv": K, "d_ff": F, "num_layers": L, "num_heads": H,
            "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
            "layer_norm_epsilon": 1e-6}


def tensors(t5):
    """(name, shape, kind) in tools/convert_t5.py's order; kind: linear, embedding, bias or norm."""
    V, D, F, L, H = t5["vocab_size"], t5["d_model"], t5["d_ff"], t5["num_layers"], t5["num_heads"]
    Inner = H * t5["d_kv"]
    out = [("shared.weight", [V, D], "embedding")]
    for i in range(L):
        a = f"encoder.block.{i}.layer.0."
        for s in ("q", "k", "v"):
            out.append((a + f"SelfAttention.{s}.weight", [Inner, D], "linear"))
        out.append((a + "SelfAttention.o.weight", [D, Inner], "linear"))
        if i == 0:
            out.append((a + "SelfAttention.relative_attention_bias.weight",
                        [t5["relative_attention_num_buckets"], H], "bias"))
        out.append((a + "layer_norm.weight", [D], "norm"))
        f = f"encoder.block.{i}.layer.1."
        out.append((f + "DenseReluDense.wi_0.weight", [F, D], "linear"))
        out.append((f + "DenseReluDense.wi_1.weight", [F, D], "linear"))
        out.append((f + "DenseReluDense.wo.weight", [D, F], "linear"))
        out.append((f + "layer_norm.weight", [D], "norm"))
    out.append(("encoder.final_layer_norm.weight", [D], "norm"))
    return out


def make(shape, kind, g):
    if kind == "norm":
        return torch.ones(shape)
    t = torch.randn(shape, generator=g)
    return t / (shape[1] ** 0.5) if kind == "linear" else t  # linear: [out, in], fan_in = in


def write_streamed(path, specs, dtype, g):
    """A safetensors file (the layout of tessera_ref.safetensors_io.write_safetensors) whose
    tensors are generated one at a time while it is written."""
    size = torch.tensor([], dtype=dtype).element_size()
    header, off = {}, 0
    for name, shape, _ in specs:
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": _TORCH_TO_ST[dtype], "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-(8 + len(hb))) % 8)
    with atomic_write(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in specs:
            f.write(tensor_bytes(make(shape, kind, g).to(dtype)))
    return 8 + len(hb) + off


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", required=True, choices=list(SIZES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t5 = t5_config(a.size)
    os.makedirs(a.out, exist_ok=True)
    g = torch.Generator().manual_seed(a.seed)
    specs = tensors(t5)
    nbytes = write_streamed(os.path.join(a.out, "t5.safetensors"), specs, DTYPES[a.dtype][1], g)
    shutil.copyfile(SPIECE, os.path.join(a.out, "spiece.model"))
    # config.json as tools/convert_t5.py writes it. The tokenizer is the T5 fixtures' SentencePiece
    # model (640 pieces, eos 1, pad 0), not flan-T5's 32,000: fine for timing (the encoder's cost
    # depends on the number of tokens, not on which ids they are), but the ids are not flan-T5's.
    config = {"tessera_format": 1, "architecture": "t5_encoder",
              "t5": dict({"file": "t5.safetensors"}, **t5, dtype=a.dtype),
              "tokenizer": {"file": "spiece.model", "eos_id": 1, "pad_id": 0}}
    with atomic_write(os.path.join(a.out, "config.json"), "w") as f:  # last: the directory is whole
        json.dump(config, f, indent=2)
    nparams = sum(torch.Size(s).numel() for _, s, _ in specs)
    print(f"wrote {a.out}: random T5-{a.size} encoder, {len(specs)} tensors, {nparams:,} params, "
          f"{a.dtype}, {nbytes / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
