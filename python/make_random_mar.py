#!/usr/bin/python3
"""Write a random-weight MAR (B/L/H) and KL-16 VAE decoder in the official checkpoint layout and
convert them to a tessera model directory with tools/convert_mar.py: the stand-in for official MAR
checkpoints in benchmarks (same shapes, same FLOPs per token).

  /usr/bin/python3 python/make_random_mar.py --model mar_base --out /tmp/mar-b
  /usr/bin/python3 python/make_random_mar.py --model mar_large --seed 1 --out /tmp/mar-l

The weights use the fixtures' structured initialisation (make_mar_fixtures.init_mar): a plain
random DiffLoss MLP makes the sampler's chains explode (|x| ~ 1e4), which would make the
continuous-SD acceptance figures meaningless; this init keeps x_0 = O(1) while every weight is
random and every tensor is exercised. The converted directory holds model_ema (as the reference
samples from).
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from make_mar_fixtures import init_mar, init_vae  # noqa: E402
from tessera_ref.mar import MAR, MAR_CONFIGS, KLDecoder, MarArgs, VAEArgs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mar_base", choices=list(MAR_CONFIGS))
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    g = torch.Generator().manual_seed(a.seed)
    mar = MAR(MarArgs(**MAR_CONFIGS[a.model])).eval()
    init_mar(mar, g)
    vae = KLDecoder(VAEArgs()).eval()
    init_vae(vae, g)
    with tempfile.TemporaryDirectory() as tmp:
        pth, ckpt = os.path.join(tmp, "mar.pth"), os.path.join(tmp, "kl16.ckpt")
        torch.save({"model_ema": mar.state_dict(), "epoch": 0}, pth)
        torch.save({"model": vae.state_dict()}, ckpt)
        del mar, vae
        subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "convert_mar.py"), "--mar", pth,
                        "--vae", ckpt, "--model", a.model, "--dtype", a.dtype, "--out", a.out], check=True)


if __name__ == "__main__":
    main()
