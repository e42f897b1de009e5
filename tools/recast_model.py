#!/usr/bin/python3
"""Copies a tessera LlamaGen model directory with its GPT weights stored in another dtype.

  /usr/bin/python3 tools/recast_model.py SRC DST --dtype bf16

Every floating-point tensor of SRC's gpt.safetensors is rounded to the new dtype (f32, f16 or bf16;
round to nearest even, as PyTorch's casts and tools/convert_llamagen.py --dtype do) and config.json's
gpt.dtype says so. The VQ decoder, the class names and the rest are copied as they are; caches
derived from the weights (lantern_neighbours_*.npy) are left out, since they no longer match.
For comparing one model's speed or numerics across dtypes: docs/performance.md times a bf16 copy
of the emoji pair. DST must not exist; a failure leaves no DST behind.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

from tessera_ref.safetensors_io import DTYPES, read_safetensors, write_safetensors  # noqa: E402


class UserError(Exception):
    pass


def recast(src, dst, dtype):
    cfg_path = os.path.join(src, "config.json")
    if not os.path.isfile(cfg_path):
        raise UserError(f"{src}: no config.json (not a tessera model directory)")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("architecture") != "llamagen" or "gpt" not in cfg:
        raise UserError(f"{src}: a LlamaGen model is needed, this one is "
                        f"'{cfg.get('architecture', 'unknown')}'")
    if os.path.exists(dst):
        raise UserError(f"{dst}: already exists; give a new directory")
    gpt_file = cfg["gpt"].get("file", "gpt.safetensors")
    tensors = read_safetensors(os.path.join(src, gpt_file))
    to = DTYPES[dtype][1]
    out = [(name, t.float().to(to) if t.is_floating_point() else t) for name, t in tensors.items()]
    cfg["gpt"]["dtype"] = dtype

    parent = os.path.dirname(os.path.abspath(dst))
    tmp = tempfile.mkdtemp(prefix=".recast-", dir=parent)
    try:
        for name in os.listdir(src):
            if name in ("config.json", gpt_file) or name.startswith("lantern_neighbours_"):
                continue
            path = os.path.join(src, name)
            if os.path.isdir(path):
                shutil.copytree(path, os.path.join(tmp, name))
            else:
                shutil.copy2(path, os.path.join(tmp, name))
        n = write_safetensors(os.path.join(tmp, gpt_file), out)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description="Copy a tessera LlamaGen model with its GPT weights "
                                             "stored in another dtype.")
    ap.add_argument("src", help="model directory to read")
    ap.add_argument("dst", help="model directory to write (must not exist)")
    ap.add_argument("--dtype", required=True, choices=list(DTYPES))
    args = ap.parse_args(argv)
    try:
        n = recast(args.src, args.dst, args.dtype)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot write {args.dst}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{args.src} -> {args.dst}: gpt weights as {args.dtype}, {n / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
