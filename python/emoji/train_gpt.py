#!/usr/bin/env python3
"""Train an emoji GPT (target or draft): LlamaGen's c2i GPT (tessera_ref.llamagen.Transformer,
official key names), class = emoji x style, with the null class for classifier-free guidance.

The class embedding is trained factorised, emb(emoji) + emb(style), so the three drawings of an
emoji share what they have in common (and a held-out (emoji, style) pair still has an embedding);
the exported checkpoint holds the summed table, i.e. LlamaGen's plain `embedding_table` layout.
Labels are replaced by the null class with probability --class-dropout (as LlamaGen trains CFG).
No dropout inside the network (the reference modules are inference-only; the data is small and
the model is meant to render the drawings it was shown).

Resumable: OUT/NAME.pt holds the official-layout state dict under "model" plus the optimiser state;
rerunning with the same OUT/NAME continues from it. Log: OUT/NAME_log.tsv.
"""
import argparse
import contextlib
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import Log, add_run_args, start_run
from tessera_ref.atomic_io import atomic_write
from tessera_ref.llamagen import ModelArgs, Transformer


class FactorisedClasses(nn.Module):
    def __init__(self, n_emoji, n_styles, dim):
        super().__init__()
        self.emoji = nn.Embedding(n_emoji, dim)
        self.style = nn.Embedding(n_styles, dim)
        self.null = nn.Parameter(torch.zeros(1, dim))
        self.n_styles = n_styles
        for p in (self.emoji.weight, self.style.weight, self.null):
            nn.init.normal_(p, std=0.02)

    def table(self):
        """[n_emoji * n_styles + 1, dim]: row c = emoji(c // S) + style(c % S); last row = null."""
        t = (self.emoji.weight[:, None, :] + self.style.weight[None, :, :]).reshape(-1, self.emoji.weight.shape[1])
        return torch.cat([t, self.null], 0)


def build(a, data):
    args = ModelArgs(dim=a.dim, n_layer=a.n_layer, n_head=a.n_head, vocab_size=a.vocab_size,
                     num_classes=data.num_classes, block_size=256, cls_token_num=1,
                     class_dropout_prob=0.1, model_type="c2i")
    gpt = Transformer(args)
    for name, p in gpt.named_parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    classes = FactorisedClasses(len(data.emoji), len(data.styles), a.dim)
    return gpt, classes


def train_forward(gpt, cond, tokens):
    """Teacher-forced logits [B, 256, V]: position i predicts token i from the class embedding
    cond [B, 1, dim] and tokens < i (the tokens given may be corrupted copies of the targets; see
    --input-noise)."""
    h = torch.cat([cond, gpt.tok_embeddings(tokens[:, :-1])], 1)
    fc = gpt.freqs_cis[:h.shape[1]].to(h.device)
    for layer in gpt.layers:
        h = layer(h, fc, None, "causal")
    return gpt.output(gpt.norm(h))


def precision_context(dev, precision):
    """bf16 autocast, or plain f32. bf16 pays off on GPUs and on CPUs with native bf16 (AVX-512
    BF16/AMX); on an AVX2-only CPU PyTorch 1.13 emulates it and a step is several times slower
    than in f32 (MODEL_CARD.md)."""
    if precision == "bf16":
        return torch.autocast(dev.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def nll(gpt, classes, labels, tokens, precision, batch=64):
    """Mean per-token NLL (nats) without label dropout."""
    gpt.eval()
    tot, n = 0.0, 0
    dev = gpt.output.weight.device
    with torch.no_grad(), precision_context(dev, precision):
        for i in range(0, len(labels), batch):
            lab, tok = labels[i:i + batch].to(dev), tokens[i:i + batch].to(dev)
            lo = train_forward(gpt, classes.table()[lab][:, None, :], tok).float()
            tot += float(F.cross_entropy(lo.reshape(-1, lo.shape[-1]), tok.reshape(-1), reduction="sum"))
            n += tok.numel()
    gpt.train()
    return tot / n


def official_state(gpt):
    """The GPT's weights in the official layout, on the CPU (the rotary table is not a weight)."""
    return {k: v.detach().cpu().clone() for k, v in gpt.state_dict().items() if k != "freqs_cis"}


def adamw(params, lr, weight_decay):
    """AdamW (betas 0.9/0.95) with weight decay on matrices only."""
    params = list(params)
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() > 1], "weight_decay": weight_decay},
                              {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def scheduled_lr(peak, step, warmup, progress):
    """Linear warm-up over `warmup` steps, then a cosine to 0 as `progress` goes from 0 to 1."""
    return peak * min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def export_state(gpt, classes):
    sd = official_state(gpt)
    sd["cls_embedding.embedding_table.weight"] = classes.table().detach().cpu().clone()
    return sd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="dataset directory (build_dataset.py)")
    ap.add_argument("--tokens", required=True, help="tokens.npy from encode_dataset.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True, help="target | draft")
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--total-steps", type=int, required=True, help="length of the cosine schedule")
    ap.add_argument("--minutes", type=float, default=1e9, help="stop (and save) after this long")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop (and save) at this step, before the schedule ends (0: never)")
    ap.add_argument("--class-dropout", type=float, default=0.1)
    ap.add_argument("--input-noise", type=float, default=0.0,
                    help="replace this fraction of the teacher-forced input tokens by random ones "
                         "(the targets stay clean): with one image per class the model otherwise "
                         "identifies the image from its prefix and learns to ignore the class")
    add_run_args(ap)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16",
                    help="bf16 autocast (GPUs, CPUs with native bf16) or f32 (AVX2-only CPUs)")
    ap.add_argument("--eval-only", action="store_true",
                    help="print the NLL figures of the model card for OUT/NAME.pt and exit")
    a = ap.parse_args()
    data = start_run(a, a.out)
    tokens = torch.from_numpy(np.load(a.tokens)).long()
    labels = torch.from_numpy(data.labels).long()
    train, held = data.indices("train"), data.indices("held_out")
    gpt, classes = build(a, data)
    dev = torch.device(a.device)
    gpt.to(dev)
    classes.to(dev)
    params = list(gpt.parameters()) + list(classes.parameters())
    opt = adamw(params, a.lr, a.weight_decay)
    ckpt_path = os.path.join(a.out, f"{a.name}.pt")
    step, gen, seconds_before = 0, torch.Generator().manual_seed(a.seed), 0.0
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location=dev)
        gpt.load_state_dict(ck["train_gpt"])
        classes.load_state_dict(ck["train_classes"])
        opt.load_state_dict(ck["optimizer"])
        step = ck["step"]
        gen.set_state(ck["generator"].cpu())
        seconds_before = ck.get("seconds", 0.0)
        print(f"resuming {ckpt_path} at step {step}")
    if a.eval_only:
        # Own class vs the null class on training images: how much the model uses the class.
        tr, null = train[:256], data.num_classes
        for name, lab, tok in [("nll_train_sample", labels[tr], tokens[tr]),
                               ("nll_train_sample_null", torch.full((len(tr),), null), tokens[tr]),
                               ("nll_held_out", labels[held], tokens[held]),
                               ("nll_held_out_uncond", torch.full((len(held),), null), tokens[held])]:
            print(f"{name}\t{nll(gpt, classes, lab, tok, a.precision):.4f}")
        return
    n_params = sum(p.numel() for p in gpt.parameters())
    print(f"{a.name}: {n_params / 1e6:.2f}M parameters (exported, incl. class table)")
    log = Log(os.path.join(a.out, f"{a.name}_log.tsv"), seconds_before)

    def save():
        with atomic_write(ckpt_path) as f:  # a run stopped mid-save resumes from the previous one
            torch.save({"model": export_state(gpt, classes), "train_gpt": gpt.state_dict(),
                        "train_classes": classes.state_dict(), "optimizer": opt.state_dict(), "step": step,
                        "generator": gen.get_state(), "args": vars(a), "n_params": n_params,
                        "seconds": log.seconds()}, f)

    t_start, t_save = time.time(), time.time()
    last = min(a.total_steps, a.stop_at) if a.stop_at > 0 else a.total_steps
    while step < last and time.time() - t_start < a.minutes * 60:
        step += 1
        lr = scheduled_lr(a.lr, step, a.warmup, step / a.total_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        pick = torch.from_numpy(train[torch.randint(0, len(train), (a.batch,), generator=gen).numpy()])
        lab = labels[pick].clone()
        drop = torch.rand(a.batch, generator=gen) < a.class_dropout
        lab[drop] = data.num_classes
        tok = tokens[pick]
        inp = tok
        if a.input_noise > 0:
            hit = torch.rand(tok.shape, generator=gen) < a.input_noise
            inp = torch.where(hit, torch.randint(0, a.vocab_size, tok.shape, generator=gen), tok)
        tok, inp, lab = tok.to(dev), inp.to(dev), lab.to(dev)
        with precision_context(dev, a.precision):
            lo = train_forward(gpt, classes.table()[lab][:, None, :], inp)
        loss = F.cross_entropy(lo.float().reshape(-1, a.vocab_size), tok.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0:
            metrics = {"loss": float(loss), "lr": lr}
            if step % 500 == 0:
                metrics["nll_held_out"] = nll(gpt, classes, labels[held], tokens[held], a.precision)
                metrics["nll_held_out_uncond"] = nll(gpt, classes, torch.full((len(held),), data.num_classes),
                                                     tokens[held], a.precision)
                metrics["nll_train_sample"] = nll(gpt, classes, labels[train[:256]], tokens[train[:256]], a.precision)
            log(step, **metrics)
        if time.time() - t_save > 300:
            save()
            t_save = time.time()
    save()
    print(f"saved {ckpt_path} at step {step}")


if __name__ == "__main__":
    main()
