#!/usr/bin/env python3
"""Train the emoji classifier (classifier.py) on the training split, for measuring generated
images. Each class has one drawing, so training leans on augmentation: random shifts and scales,
mild colour jitter and noise, and, half of the time, the drawing's VQ reconstruction (decoded
from its tokens), which is what the generator's images look like up to sampling.
Writes OUT/classifier.safetensors + classifier.json and OUT/classifier_log.tsv."""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F

from classifier import EmojiClassifier, save
from common import Log, add_run_args, start_run
from encode_dataset import load_vq


def augment(x, gen):
    B = x.shape[0]
    scale = 1 + (torch.rand(B, generator=gen) - 0.5) * 0.2
    shift = (torch.rand(B, 2, generator=gen) - 0.5) * 0.2
    theta = torch.zeros(B, 2, 3)
    theta[:, 0, 0] = scale
    theta[:, 1, 1] = scale
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta, x.shape, align_corners=False)
    # Pad with white: shift into [0, 2], sample with zero padding, shift back.
    y = F.grid_sample(x + 1, grid, padding_mode="zeros", align_corners=False) - 1
    y = y + 1 - F.grid_sample(torch.ones_like(x), grid, padding_mode="zeros", align_corners=False)
    y = y * (1 + (torch.rand(B, 3, 1, 1, generator=gen) - 0.5) * 0.1)
    y = y + 0.03 * torch.randn(y.shape, generator=gen)
    return y.clamp(-1, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--vq", required=True, help="vq.pt (for reconstructions)")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    add_run_args(ap)
    a = ap.parse_args()
    data = start_run(a, a.out)
    train = data.indices("train")
    vq = load_vq(a.vq)
    tokens = torch.from_numpy(np.load(a.tokens)).long()
    with torch.no_grad():
        recon = torch.cat([vq.decode_code(tokens[train[i:i + 128]]).clamp(-1, 1) for i in range(0, len(train), 128)])
    real = data.tensor(train)
    labels = torch.from_numpy(data.labels[train]).long()
    model = EmojiClassifier(data.num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=a.steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(a.seed)
    log = Log(os.path.join(a.out, "classifier_log.tsv"))
    for step in range(1, a.steps + 1):
        pick = torch.randint(0, len(train), (a.batch,), generator=gen)
        use_recon = (torch.rand(a.batch, generator=gen) < 0.5)[:, None, None, None]
        x = torch.where(use_recon, recon[pick], real[pick])
        loss = F.cross_entropy(model(augment(x, gen)), labels[pick], label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0:
            metrics = {"loss": float(loss)}
            if step % 500 == 0 or step == a.steps:
                model.eval()
                with torch.no_grad():
                    acc_r = float((model(real[:1024]).argmax(1) == labels[:1024]).float().mean())
                    acc_q = float((model(recon[:1024]).argmax(1) == labels[:1024]).float().mean())
                model.train()
                metrics.update(acc_real=acc_r, acc_vq_recon=acc_q)
            log(step, **metrics)
    model.eval()
    save(model, a.out)
    print(f"saved {a.out}/classifier.safetensors")


if __name__ == "__main__":
    main()
