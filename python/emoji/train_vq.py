#!/usr/bin/env python3
"""Train the emoji tokenizer: LlamaGen's VQ architecture (tessera_ref.llamagen.VQModel, official
key names), scaled down, 64x64 -> 16x16 tokens, L2-normalised codebook.

Loss: L1 + MSE reconstruction, codebook + 0.25 commitment (VQ-VAE), with dead-code restarts
(codes unused for a while are re-seeded from encoder outputs). No perceptual/GAN loss: the art is
flat-coloured and no pretrained LPIPS network can be downloaded here.
Most steps train on random 32x32 crops (6x cheaper; the network is convolutional), the last
`--full-steps` on whole 64x64 images so GroupNorm/attention see the real token grid.

Writes OUT/vq.pt (official layout: {"model": state_dict}) and OUT/vq_log.tsv; reports held-out PSNR.
"""
import argparse
import os

import torch
import torch.nn.functional as F

from common import Log, add_run_args, start_run
from tessera_ref.atomic_io import atomic_write
from tessera_ref.llamagen import VQArgs, VQModel


def vq_args(a):
    return VQArgs(codebook_size=a.codebook_size, codebook_embed_dim=a.embed_dim, codebook_l2_norm=True,
                  z_channels=a.z_channels, ch=a.ch, ch_mult=a.ch_mult, num_res_blocks=a.num_res_blocks)


def quantize(model, x):
    """Encoder -> quant_conv -> L2-normalised nearest code (straight-through). Returns the
    quantised latent, indices and the VQ loss terms."""
    h = model.quant_conv(model.encoder(x))
    z = F.normalize(h, dim=1)
    idx = model.quantize.nearest(z)                                  # [B, h*w]
    e = model.quantize.codebook()[idx].view(z.shape[0], z.shape[2], z.shape[3], -1).permute(0, 3, 1, 2)
    codebook = F.mse_loss(e, z.detach())
    commit = F.mse_loss(z, e.detach())
    zq = z + (e - z).detach()
    return zq, idx, codebook, commit


def reconstruct(model, x):
    zq, idx, codebook, commit = quantize(model, x)
    return model.decoder(model.post_quant_conv(zq)), idx, codebook, commit


def psnr(model, data, idx, batch=64):
    model.eval()
    mse = []
    with torch.no_grad():
        for i in range(0, len(idx), batch):
            x = data.tensor(idx[i:i + batch])
            y, *_ = reconstruct(model, x)
            # PSNR on the 8-bit pixels the engine writes: trunc(clamp(127.5 y + 128)).
            px = torch.clamp(127.5 * y + 128, 0, 255).floor()
            ref = torch.from_numpy(data.images[idx[i:i + batch]]).permute(0, 3, 1, 2).float()
            mse.append(((px - ref) ** 2).mean(dim=(1, 2, 3)))
    model.train()
    mse = torch.cat(mse)
    return float((10 * torch.log10(255.0 ** 2 / mse.clamp_min(1e-3))).mean())


def random_crops(x, size, gen):
    if size >= x.shape[-1]:
        return x
    n = x.shape[-1] - size
    out = []
    for i in range(x.shape[0]):
        r, c = (torch.randint(0, n // 4 + 1, (2,), generator=gen) * 4).tolist()
        out.append(x[i, :, r:r + size, c:c + size])
    return torch.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--codebook-size", type=int, default=1024)
    ap.add_argument("--embed-dim", type=int, default=8)
    ap.add_argument("--z-channels", type=int, default=64)
    ap.add_argument("--ch", type=int, default=32)
    ap.add_argument("--ch-mult", type=int, nargs="+", default=[1, 2, 2])
    ap.add_argument("--num-res-blocks", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--full-steps", type=int, default=600, help="final steps on whole 64x64 images")
    ap.add_argument("--crop", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    add_run_args(ap)
    a = ap.parse_args()
    data = start_run(a, a.out)
    train, held = data.indices("train"), data.indices("held_out")
    model = VQModel(vq_args(a))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.5, 0.9))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=a.steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(a.seed)
    log = Log(os.path.join(a.out, "vq_log.tsv"))
    last_used = torch.zeros(a.codebook_size, dtype=torch.long)
    for step in range(1, a.steps + 1):
        full = step > a.steps - a.full_steps
        pick = train[torch.randint(0, len(train), (a.batch,), generator=gen).numpy()]
        x = data.tensor(pick)
        if torch.rand(1, generator=gen).item() < 0.5:
            x = x.flip(-1)
        x = x if full else random_crops(x, a.crop, gen)
        y, idx, codebook, commit = reconstruct(model, x)
        rec = (y - x).abs().mean() + F.mse_loss(y, x)
        loss = rec + codebook + 0.25 * commit
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            last_used[idx.unique()] = step
            dead = (step - last_used > 200).nonzero().flatten()
            if step < a.steps - a.full_steps and len(dead) > 0 and step % 100 == 0:
                # Re-seed dead codes from this batch's (normalised) encoder outputs.
                z = F.normalize(model.quant_conv(model.encoder(x)), dim=1).permute(0, 2, 3, 1).reshape(-1, a.embed_dim)
                src = z[torch.randint(0, z.shape[0], (len(dead),), generator=gen)]
                model.quantize.embedding.weight[dead] = src + 0.01 * torch.randn(src.shape, generator=gen)
                last_used[dead] = step
        if step % 100 == 0 or step == a.steps:
            used = int((step - last_used <= 200).sum())
            log(step, loss=float(loss), rec=float(rec), commit=float(commit), codes_used=used,
                **({"psnr_held_out": psnr(model, data, held)} if step % 1000 == 0 or step == a.steps else {}))
    model.quantize.codebook_used.zero_()
    with atomic_write(os.path.join(a.out, "vq.pt")) as f:
        torch.save({"model": model.state_dict(), "args": vars(a)}, f)
    print(f"held-out PSNR {psnr(model, data, held):.2f} dB, train PSNR {psnr(model, data, train[:512]):.2f} dB")


if __name__ == "__main__":
    main()
