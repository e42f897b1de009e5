#!/usr/bin/python3
"""Convert an EAGLE drafter in LANTERN's layout (jadohu/llamagen_drafter and the drafters
python/emoji/train_eagle.py trains) into a tessera drafter directory (docs/model_format.md):

  /usr/bin/python3 tools/convert_eagle.py --drafter DRAFTER_DIR --target TARGET_DIR --out OUT [--dtype f16]

DRAFTER_DIR holds LANTERN's config.json (Hugging Face Llama keys: hidden_size, intermediate_size,
num_attention_heads, num_key_value_heads, vocab_size, rms_norm_eps) and its weights
(pytorch_model.bin or model.safetensors: fc, embed_tokens and layers.0 without input_layernorm).
TARGET_DIR is the tessera LlamaGen directory the drafter was trained for: its width, vocabulary,
grid, rotary base and prefix are checked and recorded. The drafter's own embed_tokens is kept
(never the target's table: LANTERN's loader may have initialised it from the target's LM head,
notes section 4.1). Errors print one line "error: ..." and exit with code 2.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from convert_llamagen import load_pt  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.convert_common import UserError, run_converter, shape_str  # noqa: E402
from tessera_ref.safetensors_io import DTYPES, write_safetensors  # noqa: E402


def expected(c):
    """Ordered name -> shape of the drafter's tensors (LANTERN's names)."""
    D, F, V = c["dim"], c["ffn_dim"], c["vocab_size"]
    hd = D // c["n_head"]
    p = "layers.0."
    return {
        "embed_tokens.weight": [V, D],
        "fc.weight": [D, 2 * D],
        "fc.bias": [D],
        p + "self_attn.q_proj.weight": [c["n_head"] * hd, D],
        p + "self_attn.k_proj.weight": [c["n_kv_head"] * hd, D],
        p + "self_attn.v_proj.weight": [c["n_kv_head"] * hd, D],
        p + "self_attn.o_proj.weight": [D, c["n_head"] * hd],
        p + "post_attention_layernorm.weight": [D],
        p + "mlp.gate_proj.weight": [F, D],
        p + "mlp.up_proj.weight": [F, D],
        p + "mlp.down_proj.weight": [D, F],
    }


def read_json(path, what):
    if not os.path.isfile(path):
        raise UserError(f"{what}: file not found: {path}")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{what}: cannot read {path}: {e}")


def weights_file(d):
    for name in ("model.safetensors", "pytorch_model.bin"):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise UserError(f"drafter: {d} holds neither model.safetensors nor pytorch_model.bin")


def drafter_config(hf, target, path):
    def need(key):
        if key not in hf:
            raise UserError(f"drafter: {path} lacks {key!r}")
        return hf[key]
    layers = hf.get("num_hidden_layers", 1)
    if layers != 1:
        raise UserError(f"drafter: {path} has num_hidden_layers {layers}; an EAGLE drafter has 1")
    dim, heads = int(need("hidden_size")), int(need("num_attention_heads"))
    c = {"file": "eagle.safetensors", "dim": dim, "n_head": heads,
         "n_kv_head": int(hf.get("num_key_value_heads", heads)), "ffn_dim": int(need("intermediate_size")),
         "vocab_size": int(need("vocab_size")), "norm_eps": float(hf.get("rms_norm_eps", 1e-6))}
    g = target["gpt"]
    if c["dim"] != g["dim"]:
        raise UserError(f"drafter: {path} has hidden_size {c['dim']} but the target's width is {g['dim']}")
    if c["vocab_size"] != g["vocab_size"]:
        raise UserError(f"drafter: {path} has vocab_size {c['vocab_size']} but the target's vocabulary "
                        f"is {g['vocab_size']}")
    if dim % heads or heads % c["n_kv_head"]:
        raise UserError(f"drafter: {path}: {heads} heads and {c['n_kv_head']} kv heads do not divide {dim}")
    # The drafter's rotary table: LlamaGen's, with a prefix one shorter than the target's (its
    # pair of the target's last prefix position is the first image token's; LANTERN: 119 for 120).
    c.update({"rope_base": float(g.get("rope_base", 10000.0)), "grid": int(g["grid"]),
              "prefix_len": int(g["cls_token_num"]) - 1,
              "feature": "post_norm", "prefix_token": 0})
    return c


def convert(args):
    hf = read_json(os.path.join(args.drafter, "config.json"), "drafter")
    target = read_json(os.path.join(args.target, "config.json"), "target")
    if target.get("architecture") != "llamagen" or "gpt" not in target:
        raise UserError(f"target: {args.target} is not a tessera LlamaGen directory")
    c = drafter_config(hf, target, os.path.join(args.drafter, "config.json"))
    wpath = weights_file(args.drafter)
    sd = load_pt(wpath, "drafter")
    exp = expected(c)
    for k, shape in exp.items():
        if k not in sd:
            raise UserError(f"drafter: {wpath}: missing tensor {k}")
        if list(sd[k].shape) != shape:
            raise UserError(f"drafter: {wpath}: {k} has shape {shape_str(sd[k].shape)}, expected {shape_str(shape)}")
    extra = sorted(k for k in sd if k not in exp)
    if extra:
        raise UserError(f"drafter: {wpath}: unexpected tensor {extra[0]} (an EAGLE drafter has one layer and "
                        f"no input_layernorm; {len(extra)} extra)")
    c["dtype"] = args.dtype
    os.makedirs(args.out, exist_ok=True)
    dt = DTYPES[args.dtype][1]
    nbytes = write_safetensors(os.path.join(args.out, c["file"]), [(k, sd[k].to(dt)) for k in exp])
    with atomic_write(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"tessera_format": 1, "architecture": "eagle", "eagle": c}, f, indent=2)
        f.write("\n")
    n = sum(sd[k].numel() for k in exp)
    print(f"eagle: dim {c['dim']} heads {c['n_head']}/{c['n_kv_head']} ffn {c['ffn_dim']} vocab {c['vocab_size']} "
          f"grid {c['grid']} prefix {c['prefix_len']}: {len(exp)} tensors, {n:,} params, {args.dtype}, "
          f"{nbytes / 2**20:.1f} MiB -> {args.out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert an EAGLE drafter (LANTERN layout) to a tessera drafter directory.")
    ap.add_argument("--drafter", required=True, help="LANTERN drafter directory (config.json + weights)")
    ap.add_argument("--target", required=True, help="tessera LlamaGen directory the drafter drafts for")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", default="f32", choices=list(DTYPES))
    args = ap.parse_args(argv)
    return run_converter(convert, args)


if __name__ == "__main__":
    sys.exit(main())
