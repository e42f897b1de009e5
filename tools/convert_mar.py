#!/usr/bin/python3
"""Convert official MAR checkpoints (LTH14/mar) and the KL-16 VAE into a tessera model directory.

  /usr/bin/python3 tools/convert_mar.py --mar checkpoint-last.pth --model mar_base \
      --vae kl16.ckpt --out models/mar_base [--dtype f32|f16|bf16]

--mar: a torch checkpoint (.pth: dict with `model_ema` (default, what MAR samples from) and
`model` (--no-ema), or a bare state dict) or a .safetensors state dict (e.g. mar-base.safetensors).
--vae: kl16.ckpt (state dict under "model", or bare) or kl16.safetensors; only `post_quant_conv.*`
and `decoder.*` are kept (`encoder.*`, `quant_conv.*`, `loss.*` are dropped).
The preset (--model) can be overridden per field (--dim --encoder-depth --decoder-depth --n-head
--diffloss-d --diffloss-w, --vae-ch --vae-ch-mult --vae-num-res-blocks --vae-z-channels ...), which
is how the tiny test fixtures are converted.

Output: DIR/mar.safetensors and DIR/vae.safetensors (official tensor names and shapes, --dtype),
DIR/config.json. Every expected tensor name and shape is validated; user errors print one line
"error: ..." and exit with code 2.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

from tessera_ref.mar import MAR_CONFIGS, MarArgs, VAEArgs, mar_expected, vae_expected  # noqa: E402
from tessera_ref.convert_common import UserError, run_converter, shape_str  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.safetensors_io import DTYPES, read_safetensors, write_safetensors  # noqa: E402




# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------

def _strip_prefix(sd):
    for p in ("module.", "_orig_mod."):
        if sd and all(isinstance(k, str) and k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    return sd


def _check_tensors(sd, path):
    for k, v in sd.items():
        if not isinstance(k, str):
            raise UserError(f"{path}: state-dict key {k!r} is not a string")
        if not torch.is_tensor(v):
            raise UserError(f"{path}: entry {k!r} is not a tensor ({type(v).__name__})")


def _load_any(path):
    if not os.path.isfile(path):
        raise UserError(f"{path}: file not found")
    if path.endswith(".safetensors"):
        try:
            return read_safetensors(path)
        except Exception as e:  # noqa: BLE001
            raise UserError(f"{path}: cannot read safetensors file: {e}")
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001
        raise UserError(f"{path}: cannot load with torch.load: {type(e).__name__}: {e}")
    if not isinstance(obj, dict):
        raise UserError(f"{path}: does not hold a dict (got {type(obj).__name__})")
    return obj


def _is_state_dict(obj):
    return len(obj) > 0 and all(torch.is_tensor(v) for v in obj.values())


def load_mar(path, use_ema):
    obj = _load_any(path)
    want = "model_ema" if use_ema else "model"
    if isinstance(obj.get(want), dict):
        sd, src = obj[want], want
    elif _is_state_dict(obj):
        sd, src = obj, "bare state dict"
    elif use_ema and isinstance(obj.get("model"), dict):
        raise UserError(f"{path}: has 'model' but no 'model_ema' entry (pass --no-ema to convert 'model')")
    else:
        keys = ", ".join(sorted(str(k) for k in obj)[:8])
        raise UserError(f"{path}: no '{want}' state dict in the checkpoint (top-level keys: {keys})")
    sd = _strip_prefix(dict(sd))
    _check_tensors(sd, path)
    return sd, src


def load_vae(path):
    obj = _load_any(path)
    if isinstance(obj.get("model"), dict):
        sd = obj["model"]
    elif isinstance(obj.get("state_dict"), dict):
        sd = obj["state_dict"]
    elif _is_state_dict(obj):
        sd = obj
    else:
        keys = ", ".join(sorted(str(k) for k in obj)[:8])
        raise UserError(f"{path}: no 'model' state dict in the VAE checkpoint (top-level keys: {keys})")
    sd = _strip_prefix(dict(sd))
    _check_tensors(sd, path)
    return sd


VAE_DROPPED = ("encoder.", "quant_conv.", "loss.")


def validate(sd, expected, path, cfg_name, ignored=lambda k: False, hint=None):
    for name, shape in expected.items():
        if name not in sd:
            h = hint(name) if hint else ""
            raise UserError(f"{path}: missing tensor {name} (expected shape {shape_str(shape)} for {cfg_name}){h}")
        got = list(sd[name].shape)
        if got != list(shape):
            h = hint(name) if hint else ""
            raise UserError(f"{path}: {name} has shape {shape_str(got)} but {cfg_name} expects {shape_str(shape)}{h}")
        if not sd[name].is_floating_point():
            raise UserError(f"{path}: {name} has non-float dtype {sd[name].dtype}")
    for name in sd:
        if name not in expected and not ignored(name):
            raise UserError(f"{path}: unexpected tensor {name} {shape_str(sd[name].shape)} (not part of {cfg_name})")


def mar_hint(sd, a):
    def count(prefix):
        return len({k[len(prefix):].split(".")[0] for k in sd if k.startswith(prefix)})

    def h(name):
        notes = []
        for prefix, n, flag in (("encoder_blocks.", a.encoder_depth, "--encoder-depth"),
                                ("decoder_blocks.", a.decoder_depth, "--decoder-depth"),
                                ("diffloss.net.res_blocks.", a.diffloss_depth, "--diffloss-d")):
            c = count(prefix)
            if c and c != n:
                notes.append(f"the checkpoint has {c} {prefix[:-1]}, pass {flag} {c}")
        w = sd.get("diffloss.net.input_proj.weight")
        if w is not None and w.dim() == 2 and w.shape[0] != a.diffloss_width:
            notes.append(f"the checkpoint's DiffLoss width is {w.shape[0]}, pass --diffloss-w {w.shape[0]}")
        f = sd.get("fake_latent")
        if f is not None and f.dim() == 2 and f.shape[1] != a.dim:
            notes.append(f"the checkpoint's dim is {f.shape[1]}")
        return (" (" + "; ".join(notes) + ")") if notes else ""
    return h


# ----------------------------------------------------------------------------------------------

def mar_args_from(args):
    if args.model not in MAR_CONFIGS:
        raise UserError(f"unknown --model {args.model} (choose from {', '.join(MAR_CONFIGS)})")
    kw = dict(MAR_CONFIGS[args.model])
    for k, v in (("dim", args.dim), ("encoder_depth", args.encoder_depth), ("decoder_depth", args.decoder_depth),
                 ("n_head", args.n_head), ("diffloss_depth", args.diffloss_d), ("diffloss_width", args.diffloss_w)):
        if v is not None:
            kw[k] = v
    a = MarArgs(mlp_ratio=args.mlp_ratio, num_classes=args.num_classes, buffer_size=args.buffer_size,
                img_size=args.img_size, vae_stride=args.vae_stride, patch_size=args.patch_size,
                vae_embed_dim=args.vae_embed_dim, num_sampling_steps=args.num_sampling_steps, **kw)
    for name in ("dim", "encoder_depth", "decoder_depth", "n_head", "diffloss_depth", "diffloss_width",
                 "num_classes", "img_size", "vae_stride", "patch_size", "vae_embed_dim", "num_sampling_steps"):
        if getattr(a, name) <= 0:
            raise UserError(f"{name} must be positive (got {getattr(a, name)})")
    if a.buffer_size < 0:
        raise UserError(f"buffer_size must be >= 0 (got {a.buffer_size})")
    if a.dim % a.n_head:
        raise UserError(f"dim {a.dim} is not divisible by n_head {a.n_head}")
    if a.img_size % (a.vae_stride * a.patch_size):
        raise UserError(f"--img-size {a.img_size} is not a multiple of vae_stride*patch_size "
                        f"{a.vae_stride * a.patch_size}")
    if int(a.dim * a.mlp_ratio) != a.dim * a.mlp_ratio:
        raise UserError(f"dim*mlp_ratio = {a.dim * a.mlp_ratio} is not an integer")
    if a.num_sampling_steps > a.num_train_timesteps:
        raise UserError(f"--num-sampling-steps {a.num_sampling_steps} exceeds {a.num_train_timesteps}")
    return a


def vae_args_from(args, a):
    try:
        mult = [int(x) for x in args.vae_ch_mult.split(",") if x.strip()]
        attn = [int(x) for x in args.vae_attn_resolutions.split(",") if x.strip()]
    except ValueError:
        raise UserError("--vae-ch-mult / --vae-attn-resolutions must be comma-separated integers")
    if not mult or min(mult) <= 0:
        raise UserError(f"--vae-ch-mult {args.vae_ch_mult} is invalid")
    v = VAEArgs(embed_dim=a.vae_embed_dim,
                z_channels=args.vae_z_channels if args.vae_z_channels is not None else a.vae_embed_dim,
                ch=args.vae_ch, ch_mult=mult, num_res_blocks=args.vae_num_res_blocks,
                attn_resolutions=attn, resolution=a.img_size, norm_groups=args.vae_norm_groups, norm_eps=1e-6,
                scale=args.vae_scale)
    down = 2 ** (len(mult) - 1)
    if down != a.vae_stride:
        raise UserError(f"vae: ch_mult {mult} downsamples by {down} but --vae-stride is {a.vae_stride}")
    for c in [v.ch * m for m in mult]:
        if c % v.norm_groups:
            raise UserError(f"vae: channel count {c} is not a multiple of the {v.norm_groups} GroupNorm groups")
    return v


def convert(args):
    if args.dtype not in DTYPES:
        raise UserError(f"--dtype {args.dtype} is not one of {', '.join(DTYPES)}")
    a = mar_args_from(args)
    v = vae_args_from(args, a)

    sd, src = load_mar(args.mar, not args.no_ema)
    mexp = mar_expected(a)
    validate(sd, mexp, args.mar, args.model + ("" if args.model_is_preset else " (overridden)"),
             hint=mar_hint(sd, a))

    vsd = load_vae(args.vae)
    vexp = vae_expected(v)
    dropped = [k for k in vsd if k.startswith(VAE_DROPPED)]
    validate(vsd, vexp, args.vae, f"VAE ch {v.ch} ch_mult {v.ch_mult} res {v.num_res_blocks}",
             ignored=lambda k: k.startswith(VAE_DROPPED))

    os.makedirs(args.out, exist_ok=True)
    tdt = DTYPES[args.dtype][1]
    mbytes = write_safetensors(os.path.join(args.out, "mar.safetensors"), [(k, sd[k].to(tdt)) for k in mexp])
    vbytes = write_safetensors(os.path.join(args.out, "vae.safetensors"), [(k, vsd[k].to(tdt)) for k in vexp])
    config = {
        "tessera_format": 1,
        "architecture": "mar",
        "mar": {
            "file": "mar.safetensors", "dtype": args.dtype,
            "dim": a.dim, "encoder_depth": a.encoder_depth, "decoder_depth": a.decoder_depth,
            "n_head": a.n_head, "mlp_ratio": float(a.mlp_ratio),
            "num_classes": a.num_classes, "buffer_size": a.buffer_size,
            "image_size": a.img_size, "vae_stride": a.vae_stride, "patch_size": a.patch_size,
            "vae_embed_dim": a.vae_embed_dim,
            "norm_eps": float(a.norm_eps),
            "diffloss_depth": a.diffloss_depth, "diffloss_width": a.diffloss_width,
            "num_train_timesteps": a.num_train_timesteps, "num_sampling_steps": a.num_sampling_steps,
            "noise_schedule": "cosine",
        },
        "vae": {
            "file": "vae.safetensors", "dtype": args.dtype,
            "embed_dim": v.embed_dim, "z_channels": v.z_channels, "ch": v.ch, "ch_mult": list(v.ch_mult),
            "num_res_blocks": v.num_res_blocks,
            "attn_resolutions": list(v.attn_resolutions), "norm_groups": v.norm_groups,
            "norm_eps": float(v.norm_eps),
            "scale": float(v.scale),
        },
    }
    # Written last, and like every file here atomically: a directory is a model only once
    # config.json names its weights, and no file in it is ever torn.
    with atomic_write(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    mparams = sum(sd[k].numel() for k in mexp)
    vparams = sum(vsd[k].numel() for k in vexp)
    print(f"mar: {args.model} [{src}] dim {a.dim} enc {a.encoder_depth} dec {a.decoder_depth} heads {a.n_head} "
          f"diffloss {a.diffloss_depth}x{a.diffloss_width} seq {a.seq_h}x{a.seq_w} token {a.token_dim}: "
          f"{len(mexp)} tensors, {mparams:,} params, {args.dtype}, {mbytes / 2**20:.1f} MiB -> "
          f"{os.path.join(args.out, 'mar.safetensors')}")
    print(f"vae: ch {v.ch} ch_mult {v.ch_mult} res {v.num_res_blocks} z {v.z_channels}: {len(vexp)} tensors, "
          f"{vparams:,} params ({len(dropped)} encoder/quant_conv/loss tensors dropped), {args.dtype}, "
          f"{vbytes / 2**20:.1f} MiB -> {os.path.join(args.out, 'vae.safetensors')}")
    print(f"config: {os.path.join(args.out, 'config.json')}")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse usage errors: one line, exit 2 (argparse's own code), like the other user errors
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    ap = _Parser(description="Convert MAR + KL-16 VAE checkpoints to a tessera model directory.")
    ap.add_argument("--mar", required=True, help="MAR checkpoint (.pth with model/model_ema, or .safetensors)")
    ap.add_argument("--vae", required=True, help="KL-16 VAE checkpoint (kl16.ckpt or .safetensors)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--model", default="mar_base", help="preset: " + ", ".join(MAR_CONFIGS))
    ap.add_argument("--no-ema", action="store_true", help="convert 'model' instead of 'model_ema'")
    ap.add_argument("--dtype", default="f32", help="storage dtype: " + ", ".join(DTYPES))
    # architecture overrides (default: the preset)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--encoder-depth", type=int)
    ap.add_argument("--decoder-depth", type=int)
    ap.add_argument("--n-head", type=int)
    ap.add_argument("--diffloss-d", type=int, help="DiffLoss MLP depth (preset: 6/8/12)")
    ap.add_argument("--diffloss-w", type=int, help="DiffLoss MLP width (preset: 1024/1280/1536)")
    ap.add_argument("--mlp-ratio", type=float, default=4.0)
    ap.add_argument("--img-size", type=int, default=256)
    ap.add_argument("--vae-stride", type=int, default=16)
    ap.add_argument("--patch-size", type=int, default=1)
    ap.add_argument("--vae-embed-dim", type=int, default=16)
    ap.add_argument("--buffer-size", type=int, default=64)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--num-sampling-steps", type=int, default=100)
    # VAE (defaults: kl16)
    ap.add_argument("--vae-ch", type=int, default=128)
    ap.add_argument("--vae-ch-mult", default="1,1,2,2,4")
    ap.add_argument("--vae-num-res-blocks", type=int, default=2)
    ap.add_argument("--vae-z-channels", type=int, help="default: --vae-embed-dim (MAR's kl16)")
    ap.add_argument("--vae-norm-groups", type=int, default=32, help="GroupNorm groups (LDM: 32)")
    ap.add_argument("--vae-attn-resolutions", default="",
                    help="comma list of up-path resolutions with attention (LDM curr_res; kl16: none)")
    ap.add_argument("--vae-scale", type=float, default=0.2325)
    args = ap.parse_args(argv)
    args.model_is_preset = all(getattr(args, k) is None for k in
                               ("dim", "encoder_depth", "decoder_depth", "n_head", "diffloss_d", "diffloss_w"))
    return run_converter(convert, args)


if __name__ == "__main__":
    sys.exit(main())
