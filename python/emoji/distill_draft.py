#!/usr/bin/env python3
"""Distil a draft GPT from the emoji target (DistillSpec, Zhou et al., 2024): the draft learns the
target's next-token distributions on sequences the target samples itself, at its default settings.

Speculative decoding accepts a drafted token with probability sum_x min(p(x), q(x)) = 1 - TV(p, q)
(Leviathan et al., 2023), so what a draft needs is the target's distributions on the prefixes the
target actually produces. The shipped draft was trained on the drawings (cross-entropy on the
data); this script instead
  1. samples --samples-per-class sequences of every training class from the target (its
     config.json "sampling": cfg, temperature 1, no top-k: the engine's defaults), plus a held-out
     set of fresh samples for measuring;
  2. trains one or more students (warm-started from --init) on those sequences, with the target's
     distributions computed teacher-forced on the fly: loss = KL(p || q) (forward KL, the
     "FKL" of DistillSpec) + --tv-weight x TV(p, q); with probability --null-prob a sequence is
     conditioned on the null class for teacher and student alike (the unguided half of CFG);
  3. logs, on the held-out samples, the expected depth-1 acceptance E[1 - TV(p, q)] of the
     initial draft and of each student, and exports each student as a tessera model directory
     (f16, through tools/convert_llamagen.py) with the target's classes.json.

One command on a GPU (the model card records the run):
  python3 python/emoji/distill_draft.py --target models/emoji/target --init models/emoji/draft \\
      --out RUNS/distill --device cuda --minutes 6 --tv-weights 0,1
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

from common import Log, seed_all
from export import convert_gpt
from train_gpt import adamw, official_state, precision_context, scheduled_lr, train_forward
from tessera_ref.atomic_io import atomic_write
from tessera_ref.llamagen import generate, load_tessera_gpt


def training_classes(model_dir):
    """Class ids the model was trained on (classes.json minus its held-out classes)."""
    meta = json.load(open(os.path.join(model_dir, "classes.json")))
    held = set(meta.get("held_out_classes", []))
    return [c for c in range(len(meta["classes"])) if c not in held]


@torch.no_grad()
def sample_sequences(target, labels, cfg, chunk):
    """[N, 256] tokens sampled from the target for labels [N] (temperature 1, full distribution)."""
    out = []
    for i in range(0, len(labels), chunk):
        out.append(generate(target, labels[i:i + chunk], target.block_size, cfg_scale=cfg,
                            temperature=1.0, top_k=0).long())
    target.causal_mask = None  # the caches are not needed for teacher forcing
    for layer in target.layers:
        layer.attention.kv_cache = None
    return torch.cat(out)


def cond_of(gpt, labels):
    return gpt.cls_embedding.embedding_table(labels)[:, None, :]


def divergences(p_logits, q_logits):
    """Per-position forward KL(p || q) and TV(p, q), in f32."""
    logp = F.log_softmax(p_logits.float(), -1)
    logq = F.log_softmax(q_logits.float(), -1)
    p = logp.exp()
    kl = (p * (logp - logq)).sum(-1)
    tv = 0.5 * (p - logq.exp()).abs().sum(-1)
    return kl, tv


@torch.no_grad()
def acceptance(target, draft, labels, tokens, batch=256):
    """Mean over positions of 1 - TV(p, q): exact speculative decoding's expected acceptance of a
    drafted token on the target's own prefixes; also the mean forward KL."""
    acc, kl_sum, n = 0.0, 0.0, 0
    for i in range(0, len(labels), batch):
        lab, tok = labels[i:i + batch], tokens[i:i + batch]
        p = train_forward(target, cond_of(target, lab), tok)  # f32: the measurement, not training
        q = train_forward(draft, cond_of(draft, lab), tok)
        kl, tv = divergences(p, q)
        acc += float((1 - tv).sum())
        kl_sum += float(kl.sum())
        n += tv.numel()
    return acc / n, kl_sum / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="tessera model directory of the target")
    ap.add_argument("--init", required=True, help="tessera model directory of the draft to start from")
    ap.add_argument("--out", required=True, help="run directory: checkpoints, log, exported drafts")
    ap.add_argument("--samples-per-class", type=int, default=48)
    ap.add_argument("--max-classes", type=int, default=0, help="only the first N training classes (smoke tests)")
    ap.add_argument("--eval-samples", type=int, default=1024, help="held-out target samples for the log")
    ap.add_argument("--sample-chunk", type=int, default=8192, help="sequences sampled at once")
    ap.add_argument("--tv-weights", default="0", help="one student per weight: loss = KL + w * TV")
    ap.add_argument("--null-prob", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=128, help="sequences per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1000000, help="cosine schedule length in steps")
    ap.add_argument("--minutes", type=float, default=1e9,
                    help="training time; the cosine follows whichever of steps and time runs out first")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--dtype", default="f16", help="weight dtype of the exported drafts")
    a = ap.parse_args()
    seed_all(a.seed)
    dev = torch.device(a.device)
    os.makedirs(a.out, exist_ok=True)
    target = load_tessera_gpt(a.target).to(dev).eval()
    init = load_tessera_gpt(a.init).to(dev).eval()
    for p in list(target.parameters()) + list(init.parameters()):
        p.requires_grad_(False)
    cfg = json.load(open(os.path.join(a.target, "config.json"))).get("sampling", {}).get("cfg", 1.0)
    classes = torch.tensor(training_classes(a.target), device=dev)
    if a.max_classes > 0:
        classes = classes[:a.max_classes]

    t0 = time.time()
    labels = classes.repeat(a.samples_per_class)
    labels = labels[torch.randperm(len(labels), device=dev)]
    tokens = sample_sequences(target, labels, cfg, a.sample_chunk)
    eval_labels = classes[torch.randint(0, len(classes), (a.eval_samples,), device=dev)]
    eval_tokens = sample_sequences(target, eval_labels, cfg, a.sample_chunk)
    print(f"sampled {len(tokens)} + {len(eval_tokens)} sequences from the target in {time.time() - t0:.0f}s "
          f"(cfg {cfg})", flush=True)

    weights = [float(w) for w in a.tv_weights.split(",")]
    students, opts = [], []
    for _ in weights:
        s = load_tessera_gpt(a.init).to(dev).train()
        students.append(s)
        opts.append(adamw(s.parameters(), a.lr, a.weight_decay))
    log = Log(os.path.join(a.out, "distill_log.tsv"))
    acc0, kl0 = acceptance(target, init, eval_labels, eval_tokens)
    log(0, init_acceptance=acc0, init_kl=kl0)

    def evaluate(step):
        metrics = {}
        for w, s in zip(weights, students):
            s.eval()
            acc, kl = acceptance(target, s, eval_labels, eval_tokens)
            s.train()
            metrics[f"acceptance_tv{w:g}"], metrics[f"kl_tv{w:g}"] = acc, kl
        log(step, **metrics)
        return metrics

    gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
    step, t_train = 0, time.time()
    null = target.num_classes
    while True:
        progress = max(step / a.steps, (time.time() - t_train) / (a.minutes * 60))
        if progress >= 1:
            break
        step += 1
        lr = scheduled_lr(a.lr, step, a.warmup, progress)
        pick = torch.randint(0, len(tokens), (a.batch,), device=dev, generator=gen)
        tok, lab = tokens[pick], labels[pick].clone()
        lab[torch.rand(a.batch, device=dev, generator=gen) < a.null_prob] = null
        with torch.no_grad(), precision_context(dev, a.precision):
            p = train_forward(target, cond_of(target, lab), tok)
        for w, s, opt in zip(weights, students, opts):
            for g in opt.param_groups:
                g["lr"] = lr
            with precision_context(dev, a.precision):
                q = train_forward(s, cond_of(s, lab), tok)
            kl, tv = divergences(p, q)
            loss = kl.mean() + w * tv.mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(s.parameters(), 1.0)
            opt.step()
        if step % a.eval_every == 0:
            evaluate(step)
    final = evaluate(step)
    print(f"trained {step} steps in {time.time() - t_train:.0f}s", flush=True)

    summary = {"steps": step, "sequences": len(tokens), "init_acceptance": acc0, "init_kl": kl0,
               "students": {}, "args": vars(a)}
    for w, s in zip(weights, students):
        name = f"draft_tv{w:g}"
        ckpt = os.path.join(a.out, f"{name}.pt")
        c = s.config
        with atomic_write(ckpt) as f:
            torch.save({"model": official_state(s), "args": {"dim": c.dim, "n_layer": c.n_layer, "n_head": c.n_head,
                                              "vocab_size": c.vocab_size}}, f)
        out_dir = os.path.join(a.out, name)
        convert_gpt(ckpt, out_dir, target.num_classes, a.dtype)
        shutil.copyfile(os.path.join(a.init, "classes.json"), os.path.join(out_dir, "classes.json"))
        summary["students"][name] = {"tv_weight": w, "acceptance": final[f"acceptance_tv{w:g}"],
                                     "kl": final[f"kl_tv{w:g}"]}
    with atomic_write(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
