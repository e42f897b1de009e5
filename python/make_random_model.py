#!/usr/bin/python3
"""Write a random-weight LlamaGen model in the official checkpoint layout and convert it to a
tessera model directory: the stand-in for official checkpoints in benchmarks (same shapes, same
bytes streamed per token).

  /usr/bin/python3 python/make_random_model.py --gpt-model GPT-B --out /tmp/gpt-b-f32
  /usr/bin/python3 python/make_random_model.py --gpt-model GPT-B --dtype bf16 --out /tmp/gpt-b-bf16
  /usr/bin/python3 python/make_random_model.py --gpt-model GPT-B --vq-model VQ-16 --out /tmp/gpt-b-vq
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from tessera_ref.llamagen import GPT_CONFIGS, VQ_CONFIGS, VQArgs, VQModel, random_gpt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt-model", default="GPT-B", choices=list(GPT_CONFIGS))
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--downsample", type=int, default=16)
    ap.add_argument("--model-type", default="c2i", choices=["c2i", "t2i"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vq-model", choices=list(VQ_CONFIGS),
                    help="also write a random VQ decoder of this size (LANTERN needs its codebook)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m = random_gpt(a.gpt_model, a.image_size, a.downsample, a.model_type)
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "gpt.pt")
        torch.save({"model": m.state_dict()}, pt)
        cmd = [sys.executable, os.path.join(HERE, "..", "tools", "convert_llamagen.py"), "--gpt", pt,
               "--gpt-model", a.gpt_model, "--image-size", str(a.image_size), "--downsample",
               str(a.downsample), "--model-type", a.model_type, "--dtype", a.dtype, "--out", a.out]
        if a.vq_model:
            vq = VQModel(VQArgs(ch_mult=VQ_CONFIGS[a.vq_model]))
            with torch.no_grad():
                vq.quantize.embedding.weight.normal_()
            vq_pt = os.path.join(tmp, "vq.pt")
            torch.save({"model": vq.state_dict()}, vq_pt)
            cmd += ["--vq", vq_pt, "--vq-model", a.vq_model]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
