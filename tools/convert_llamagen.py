#!/usr/bin/python3
"""Convert official LlamaGen checkpoints into a tessera model directory (docs/model_format.md).

  /usr/bin/python3 tools/convert_llamagen.py --gpt c2i_B_256.pt --vq vq_ds16_c2i.pt \
      --gpt-model GPT-B --image-size 256 --out models/c2i_B_256 [--dtype bf16]

Every expected tensor name and shape is validated against the chosen config; user errors print
one line "error: ..." and exit with code 2.
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

from tessera_ref.convert_common import DecoderTensors, UserError, run_converter, shape_str  # noqa: E402
from tessera_ref.llamagen import GPT_CONFIGS, VQ_CONFIGS, default_ffn_dim  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.safetensors_io import DTYPES, read_safetensors, write_safetensors  # noqa: E402


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------

def load_pt(path, what, prefer_ema=False):
    if not os.path.isfile(path):
        raise UserError(f"{what}: file not found: {path}")
    if path.endswith(".safetensors"):
        try:
            return read_safetensors(path)
        except Exception as e:  # noqa: BLE001
            raise UserError(f"{what}: cannot read safetensors file {path}: {e}")
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001
        raise UserError(f"{what}: cannot load {path} with torch.load: {type(e).__name__}: {e}")
    if not isinstance(obj, dict):
        raise UserError(f"{what}: {path} does not hold a dict (got {type(obj).__name__})")
    keys = (["ema"] if prefer_ema else []) + ["model", "module", "state_dict"]
    for k in keys:
        if k in obj and isinstance(obj[k], dict):
            sd = obj[k]
            break
    else:
        sd = obj
    # strip a prefix common to every key (DDP "module." or torch.compile "_orig_mod.")
    for p in ("module.", "_orig_mod."):
        if sd and all(isinstance(k, str) and k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    for k, v in sd.items():
        if not torch.is_tensor(v):
            raise UserError(f"{what}: entry {k!r} in {path} is not a tensor ({type(v).__name__})")
    return sd


# ----------------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------------

def gpt_expected(cfg):
    """Ordered name -> shape for the tessera gpt.safetensors."""
    D, L, H, F, V = cfg["dim"], cfg["n_layer"], cfg["n_head"], cfg["ffn_dim"], cfg["vocab_size"]
    hkv = cfg["n_kv_head"]
    hd = D // H
    e = {"tok_embeddings.weight": [V, D]}
    if cfg["model_type"] == "c2i":
        e["cls_embedding.embedding_table.weight"] = [cfg["num_classes"] + 1, D]
    else:
        e["cls_embedding.cap_proj.fc1.weight"] = [D, cfg["caption_dim"]]
        e["cls_embedding.cap_proj.fc2.weight"] = [D, D]
        e["cls_embedding.uncond_embedding"] = [cfg["cls_token_num"], cfg["caption_dim"]]
    for i in range(L):
        p = f"layers.{i}."
        e[p + "attention.wqkv.weight"] = [(H + 2 * hkv) * hd, D]
        e[p + "attention.wo.weight"] = [D, D]
        e[p + "feed_forward.w1.weight"] = [F, D]
        e[p + "feed_forward.w3.weight"] = [F, D]
        e[p + "feed_forward.w2.weight"] = [D, F]
        e[p + "attention_norm.weight"] = [D]
        e[p + "ffn_norm.weight"] = [D]
    e["norm.weight"] = [D]
    e["output.weight"] = [V, D]
    return e


def gpt_is_ignored(name):
    return name == "freqs_cis" or "kv_cache" in name or name == "causal_mask"


def validate(sd, expected, what, cfg_name, ignored, extra_hint=None):
    for name, shape in expected.items():
        if name not in sd:
            hint = extra_hint(name) if extra_hint else ""
            raise UserError(f"{what}: missing tensor {name} (expected shape {shape_str(shape)} for {cfg_name}){hint}")
        got = list(sd[name].shape)
        if got != list(shape):
            raise UserError(f"{what}: {name} has shape {shape_str(got)} but {cfg_name} expects {shape_str(shape)}")
        if not sd[name].is_floating_point():
            raise UserError(f"{what}: {name} has non-float dtype {sd[name].dtype}")
    for name in sd:
        if name not in expected and not ignored(name):
            raise UserError(f"{what}: unexpected tensor {name} {shape_str(sd[name].shape)} "
                            f"(not part of {cfg_name})")


def gpt_config(args, sd):
    if args.gpt_model == "custom":
        if args.dim is None or args.n_layer is None or args.n_head is None:
            raise UserError("--gpt-model custom needs --dim, --n-layer and --n-head")
        L, H, D = args.n_layer, args.n_head, args.dim
    else:
        L, H, D = GPT_CONFIGS[args.gpt_model]
        for flag, v in (("--dim", args.dim), ("--n-layer", args.n_layer), ("--n-head", args.n_head)):
            if v is not None:
                raise UserError(f"{flag} is only valid with --gpt-model custom")
    if D % H != 0:
        raise UserError(f"dim {D} is not divisible by n_head {H}")
    if (D // H) % 4 != 0:
        raise UserError(f"head dim {D // H} must be a multiple of 4 for 2D RoPE")
    ffn = default_ffn_dim(D)
    w1 = sd.get("layers.0.feed_forward.w1.weight")
    if args.ffn_dim is not None:
        ffn = args.ffn_dim
    elif args.gpt_model == "custom" and w1 is not None and w1.dim() == 2:
        ffn = int(w1.shape[0])  # custom: the checkpoint says what the FFN size is
    if args.image_size % args.downsample != 0:
        raise UserError(f"--image-size {args.image_size} is not a multiple of --downsample {args.downsample}")
    grid = args.image_size // args.downsample
    T = args.cls_token_num if args.cls_token_num is not None else (1 if args.model_type == "c2i" else 120)
    if args.model_type == "c2i" and T != 1:
        raise UserError("c2i models have cls_token_num 1")
    return {
        "file": "gpt.safetensors",
        "model_type": args.model_type,
        "dim": D, "n_layer": L, "n_head": H, "n_kv_head": H,
        "ffn_dim": ffn,
        "vocab_size": args.vocab_size,
        "num_classes": args.num_classes,
        "cls_token_num": T,
        "caption_dim": args.caption_dim,
        "rope_base": 10000.0,
        "norm_eps": 1e-05,
        "image_size": args.image_size, "downsample": args.downsample, "grid": grid,
        "dtype": args.dtype,
    }


def gpt_hint(model_type, sd, n_layer):
    def h(name):
        if model_type == "t2i" and "cls_embedding.embedding_table.weight" in sd:
            return " (the checkpoint looks class-conditional: use --model-type c2i)"
        if model_type == "c2i" and "cls_embedding.cap_proj.fc1.weight" in sd:
            return " (the checkpoint looks text-conditional: use --model-type t2i)"
        if name.startswith("layers."):
            n = len({k.split(".")[1] for k in sd if k.startswith("layers.")})
            if n != n_layer:
                return f" (the checkpoint has {n} layers, the config {n_layer})"
        return ""
    return h


# ----------------------------------------------------------------------------------------------
# VQ
# ----------------------------------------------------------------------------------------------

def vq_expected(c):
    E = {"quantize.embedding.weight": [c["codebook_size"], c["codebook_embed_dim"]],
         "post_quant_conv.weight": [c["z_channels"], c["codebook_embed_dim"], 1, 1],
         "post_quant_conv.bias": [c["z_channels"]]}
    ch, mult, r = c["ch"], c["ch_mult"], c["num_res_blocks"]
    n = len(mult)

    T = DecoderTensors(E)
    conv, gn, res, attn = T.conv, T.gn, T.res, T.attn

    bi = ch * mult[n - 1]
    conv("decoder.conv_in", c["z_channels"], bi, 3)
    res("decoder.mid.0", bi, bi)
    attn("decoder.mid.1", bi)
    res("decoder.mid.2", bi, bi)
    for b in range(n):
        bo = ch * mult[n - 1 - b]
        for j in range(r + 1):
            res(f"decoder.conv_blocks.{b}.res.{j}", bi, bo)
            bi = bo
            if b == 0:
                attn(f"decoder.conv_blocks.{b}.attn.{j}", bi)
        if b != n - 1:
            conv(f"decoder.conv_blocks.{b}.upsample.conv", bi, bi, 3)
    gn("decoder.norm_out", bi)
    conv("decoder.conv_out", bi, 3, 3)
    return E


def vq_is_ignored(name):
    return (name.startswith("encoder.") or name.startswith("quant_conv.")
            or name == "quantize.codebook_used")


def vq_infer_custom(sd):
    def need(k):
        if k not in sd:
            raise UserError(f"vq: missing tensor {k} (needed to infer the custom VQ config)")
        return list(sd[k].shape)
    cs, ed = need("quantize.embedding.weight")
    z = need("post_quant_conv.weight")[0]
    levels = sorted({int(k.split(".")[2]) for k in sd if k.startswith("decoder.conv_blocks.")})
    if not levels or levels != list(range(len(levels))):
        raise UserError("vq: cannot infer the decoder levels from decoder.conv_blocks.* tensors")
    n = len(levels)
    outs = [need(f"decoder.conv_blocks.{b}.res.0.conv1.weight")[0] for b in range(n)]
    r = len({k.split(".")[4] for k in sd if k.startswith("decoder.conv_blocks.0.res.")}) - 1
    if "encoder.conv_in.weight" in sd:
        ch = int(sd["encoder.conv_in.weight"].shape[0])
    else:
        ch = 0
        for o in outs:
            ch = math.gcd(ch, o)
    if any(o % ch for o in outs):
        raise UserError(f"vq: decoder level widths {outs} are not multiples of ch {ch}")
    mult = [o // ch for o in reversed(outs)]
    return cs, ed, z, ch, mult, r


def vq_config(args, sd):
    if args.vq_model == "auto":
        name = {16: "VQ-16", 8: "VQ-8"}.get(args.downsample, "custom")
    else:
        name = args.vq_model
    if name == "custom":
        cs, ed, z, ch, mult, r = vq_infer_custom(sd)
    else:
        mult = VQ_CONFIGS[name]
        ch, z, r = 128, 256, 2
        if "quantize.embedding.weight" not in sd:
            raise UserError("vq: missing tensor quantize.embedding.weight")
        cs, ed = list(sd["quantize.embedding.weight"].shape)
    ds = 2 ** (len(mult) - 1)
    if ds != args.downsample:
        raise UserError(f"vq: {name} (ch_mult {mult}) downsamples by {ds} but --downsample is {args.downsample}")
    if cs != args.vocab_size:
        raise UserError(f"vq: codebook size {cs} differs from the GPT vocab size {args.vocab_size}")
    for c in [ch * m for m in mult] + [z]:
        if c % 32 != 0:
            raise UserError(f"vq: channel count {c} is not a multiple of the 32 GroupNorm groups")
    return name, {
        "file": "vq.safetensors",
        "codebook_size": int(cs), "codebook_embed_dim": int(ed), "codebook_l2_norm": True,
        "z_channels": int(z), "ch": int(ch), "ch_mult": [int(m) for m in mult], "num_res_blocks": int(r),
        "norm_groups": 32, "norm_eps": 1e-06,
        "dtype": args.vq_dtype,
    }


# ----------------------------------------------------------------------------------------------

def convert(args):
    if args.text_encoder is not None and args.model_type != "t2i":
        raise UserError("--text-encoder is for text-conditional models (--model-type t2i)")
    sd = load_pt(args.gpt, "gpt")
    gcfg = gpt_config(args, sd)
    gexp = gpt_expected(gcfg)
    validate(sd, gexp, "gpt", args.gpt_model, gpt_is_ignored, gpt_hint(args.model_type, sd, gcfg["n_layer"]))
    vcfg = None
    if args.vq:
        vsd = load_pt(args.vq, "vq", prefer_ema=True)
        vname, vcfg = vq_config(args, vsd)
        vexp = vq_expected(vcfg)
        validate(vsd, vexp, "vq", vname, vq_is_ignored)

    if args.text_encoder is not None:
        te_config = os.path.join(args.text_encoder, "config.json")
        try:
            with open(te_config) as f:
                te = json.load(f)
        except (OSError, ValueError) as e:
            raise UserError(f"--text-encoder {args.text_encoder}: cannot read {te_config}: {e}")
        if not isinstance(te, dict) or te.get("architecture") != "t5_encoder":
            raise UserError(f"--text-encoder {args.text_encoder}: not a tessera T5 encoder directory "
                            "(convert it with tools/convert_t5.py)")
        if te.get("t5", {}).get("d_model") != gcfg["caption_dim"]:
            raise UserError(f"--text-encoder {args.text_encoder}: its width d_model "
                            f"{te.get('t5', {}).get('d_model')} is not the GPT's caption_dim {gcfg['caption_dim']}")
    os.makedirs(args.out, exist_ok=True)
    gdt = DTYPES[args.dtype][1]
    gbytes = write_safetensors(os.path.join(args.out, "gpt.safetensors"),
                               [(k, sd[k].to(gdt)) for k in gexp])
    nparams = sum(sd[k].numel() for k in gexp)
    config = {"tessera_format": 1, "architecture": "llamagen", "gpt": gcfg}
    if args.text_encoder is not None:  # relative, so the two directories move together
        config["companions"] = {"text_encoder": os.path.relpath(os.path.abspath(args.text_encoder),
                                                                os.path.abspath(args.out))}
    lines = [f"gpt: {args.gpt_model} {gcfg['model_type']} dim {gcfg['dim']} layers {gcfg['n_layer']} "
             f"heads {gcfg['n_head']} ffn {gcfg['ffn_dim']} vocab {gcfg['vocab_size']} grid {gcfg['grid']} "
             f"T {gcfg['cls_token_num']}: {len(gexp)} tensors, {nparams:,} params, {args.dtype}, "
             f"{gbytes / 2**20:.1f} MiB -> {os.path.join(args.out, 'gpt.safetensors')}"]
    if vcfg is not None:
        vdt = DTYPES[args.vq_dtype][1]
        vbytes = write_safetensors(os.path.join(args.out, "vq.safetensors"),
                                   [(k, vsd[k].to(vdt)) for k in vexp])
        config["vq"] = vcfg
        vparams = sum(vsd[k].numel() for k in vexp)
        lines.append(f"vq: {vname} codebook {vcfg['codebook_size']}x{vcfg['codebook_embed_dim']} z {vcfg['z_channels']} "
                     f"ch {vcfg['ch']} ch_mult {vcfg['ch_mult']} res {vcfg['num_res_blocks']}: {len(vexp)} tensors, "
                     f"{vparams:,} params, {args.vq_dtype}, {vbytes / 2**20:.1f} MiB -> "
                     f"{os.path.join(args.out, 'vq.safetensors')}")
    # Written last, and like every file here atomically: a directory is a model only once
    # config.json names its weights, and no file in it is ever torn.
    with atomic_write(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    lines.append(f"config: {os.path.join(args.out, 'config.json')}")
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert LlamaGen checkpoints to a tessera model directory.")
    ap.add_argument("--gpt", required=True, help="GPT checkpoint (.pt)")
    ap.add_argument("--vq", help="VQ checkpoint (.pt or .safetensors); optional")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--gpt-model", default="GPT-B", choices=list(GPT_CONFIGS) + ["custom"])
    ap.add_argument("--dim", type=int)
    ap.add_argument("--n-layer", type=int)
    ap.add_argument("--n-head", type=int)
    ap.add_argument("--ffn-dim", type=int, help="override the SwiGLU hidden size (default: derived)")
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--downsample", type=int, default=16)
    ap.add_argument("--model-type", default="c2i", choices=["c2i", "t2i"])
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--cls-token-num", type=int, help="default 1 (c2i) / 120 (t2i)")
    ap.add_argument("--caption-dim", type=int, default=2048)
    ap.add_argument("--vocab-size", type=int, default=16384)
    ap.add_argument("--vq-model", default="auto", choices=["auto", "VQ-16", "VQ-8", "custom"],
                    help="auto: VQ-16 for --downsample 16, VQ-8 for 8, else custom (read from shapes)")
    ap.add_argument("--dtype", default="f32", choices=list(DTYPES))
    ap.add_argument("--text-encoder", help="t2i: the T5 encoder directory of typed prompts "
                    "(tools/convert_t5.py), named in config.json's companions relative to --out")
    ap.add_argument("--vq-dtype", default="f32", choices=list(DTYPES))
    args = ap.parse_args(argv)
    return run_converter(convert, args)


if __name__ == "__main__":
    sys.exit(main())
