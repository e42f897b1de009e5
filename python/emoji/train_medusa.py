#!/usr/bin/env python3
"""Train Medusa draft heads (Cai et al., 2024; python/tessera_ref/medusa.py) for a tessera
LlamaGen target, on the target's own samples and hidden states (Medusa-1: the target is frozen).

  1. Samples and features: as train_eagle.py (target_samples.py): sequences the engine draws from
     the target at its default settings (cached per class in RUN/samples/), of which --sequences
     are used (a random subset: the features cost ~0.26 s per sequence on 2 cores), and the
     target's last hidden state after its final norm over them (the feature the heads read), with
     a --null-prob share featurised again with the null class (CFG's unguided half).
  2. Training (Medusa's train_legacy.py): head k's logits at position t (the row whose target
     logits predict image token t) are scored against image token t + 1 + k, i.e. Medusa's
     labels[t + 2 + k] with the root at t + 1. The K cross-entropies are summed with equal weight,
     as Medusa's code does (the paper's Medusa-1 decays them by 0.8^k; equal weights keep the deep
     heads, which a CPU tree uses least, from being starved less than the paper would). The heads
     read the target's frozen LM head (Medusa-2's shared lm_head). AdamW, warm-up then cosine.
  3. Logs, per head on the held-out sequences, top-1 agreement with the sampled token and the
     acceptance of its top-1 token under exact verification, E[p(x)] with p the target's
     distribution at that position (temperature 1, no guidance); writes RUN/medusa.pt and, with
     --export DIR, the heads as a tessera directory (f16).

With --vertical D it trains Hawk's heads (Chen et al., 2025, section 4.2; python/tessera_ref/medusa.py's
HawkHeads): the --heads horizontal ones as above and D vertical ones, vertical head d (0-based) at
row t scored against the token d + 1 image rows below image token t, t + (d + 1) W, all losses with
weight 1 (Hawk's lambda_k = 1), exported as "architecture": "hawk".

  python3 python/emoji/train_medusa.py --target models/emoji/target --tessera build/tessera \\
      --out RUNS/medusa --sequences 2000 --minutes 12 --export models/emoji/medusa

Any LlamaGen target in tessera's format: class-conditional (its classes.json's training classes,
else every class) or text-conditional with --captions DIR (one .npy of T5 caption features per
caption, as `tessera generate --caption` reads them); --device cuda extracts the features and
trains on a GPU. docs/methods.md ("Training heads for another target") sizes a GPT-XL t2i run.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from common import Log
from target_samples import add_run_args, prepare_run
from train_gpt import adamw, scheduled_lr

from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.medusa import HawkHeads, MedusaHeads, write_tessera, write_tessera_hawk  # noqa: E402


def offsets(heads):
    """Token offset of each head from the row t whose target logits predict image token t: Medusa's
    head k predicts t + 1 + k, Hawk's vertical head d the token d + 1 rows below t, t + (d + 1) W."""
    out = [1 + k for k in range(heads.num_heads)]
    if isinstance(heads, HawkHeads):
        out += [(d + 1) * heads.row_width for d in range(heads.vertical_heads)]
    return out


def all_logits(heads, lm_head, feats):
    """[K (+ D), B, 256, V]: every head's logits, Hawk's vertical heads after the horizontal ones."""
    logits = heads(feats, lm_head)
    if isinstance(heads, HawkHeads):
        logits = torch.cat([logits, heads.vertical(feats, lm_head)])
    return logits


def losses(heads, lm_head, feats, tokens):
    """feats [B, 256, H] (f_0..f_255), tokens [B, 256]. Head i at row t -> token t + offsets[i].
    Returns the per-head mean cross-entropies and the logits."""
    logits = all_logits(heads, lm_head, feats)
    ce = []
    for i, off in enumerate(offsets(heads)):
        n = tokens.shape[1] - off
        ce.append(F.cross_entropy(logits[i, :, :n].flatten(0, 1), tokens[:, off:].flatten()))
    return torch.stack(ce), logits


@torch.no_grad()
def measure(heads, lm_head, feats, tokens, batch=32):
    offs = offsets(heads)
    K = len(offs)
    top1, accept, count = torch.zeros(K), torch.zeros(K), torch.zeros(K)
    dev = lm_head.weight.device
    for s in range(0, len(tokens), batch):
        f, tok = feats[s:s + batch].float().to(dev), tokens[s:s + batch].to(dev)
        _, logits = losses(heads, lm_head, f, tok)
        p = F.softmax(lm_head(f), -1)  # the target's distribution at every row
        for k, off in enumerate(offs):
            n = tok.shape[1] - off
            guess = logits[k, :, :n].argmax(-1)  # the head's top-1 for token t + off
            top1[k] += float((guess == tok[:, off:]).sum())
            # Token t + off's target distribution is row t + off's.
            accept[k] += float(p[:, off:].gather(-1, guess[..., None]).sum())
            count[k] += guess.numel()
    return (top1 / count).tolist(), (accept / count).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, "heads")
    ap.add_argument("--heads", type=int, default=4, help="Medusa's heads (Hawk's horizontal ones)")
    ap.add_argument("--vertical", type=int, default=0,
                    help="Hawk's vertical heads (its vertical speculation depth); > 0 trains Hawk's heads")
    ap.add_argument("--lr", type=float, default=1e-3, help="Medusa's train_vicuna_7b.sh: 1e-3")
    ap.add_argument("--init", help="start from heads this script wrote (RUN/medusa.pt)")
    a = ap.parse_args()
    gpt, (tr_feat, tr_tok), (ev_feat, ev_tok), counts = prepare_run(a)

    c = gpt.config
    heads = (HawkHeads(c.dim, a.heads, a.vertical, gpt.grid_size, c.vocab_size) if a.vertical
             else MedusaHeads(c.dim, a.heads, c.vocab_size))
    if a.init:  # continue from heads this script wrote
        heads.load_state_dict(torch.load(a.init, map_location="cpu"), strict=True)
    lm_head = gpt.output
    dev = lm_head.weight.device
    heads.to(dev)
    opt = adamw(heads.parameters(), a.lr, 0.0)
    kind = "hawk" if a.vertical else "medusa"
    log = Log(os.path.join(a.out, f"{kind}_log.tsv"))
    names = [f"h{k}" for k in range(a.heads)] + [f"v{d}" for d in range(a.vertical)]

    def record(step, **extra):
        top1, accept = measure(heads, lm_head, ev_feat, ev_tok)
        fields = {f"top1_{n}": v for n, v in zip(names, top1)}
        fields.update({f"accept_{n}": v for n, v in zip(names, accept)})
        log(step, **fields, **extra)
        return top1, accept

    top1_0, accept_0 = record(0)
    gen = torch.Generator().manual_seed(a.seed + 1)
    step, t_train = 0, time.time()
    while True:
        progress = max(step / a.steps, (time.time() - t_train) / (a.minutes * 60))
        if progress >= 1:
            break
        step += 1
        for g in opt.param_groups:
            g["lr"] = scheduled_lr(a.lr, step, a.warmup, progress)
        pick = torch.randint(0, len(tr_tok), (a.batch,), generator=gen)
        ce, _ = losses(heads, lm_head, tr_feat[pick].float().to(dev), tr_tok[pick].to(dev))
        loss = ce.sum()  # Medusa's train_legacy.py: equal weights
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step}: ce {' '.join(f'{float(x):.3f}' for x in ce)} ({time.time() - t_train:.0f}s)",
                  flush=True)
        if step % a.eval_every == 0:
            record(step, loss=float(loss))
    top1, accept = record(step)
    wall = time.time() - t_train
    print(f"trained {step} steps in {wall:.0f}s: held-out top-1 {[round(x, 3) for x in top1]}, acceptance "
          f"{[round(x, 3) for x in accept]} (start {[round(x, 3) for x in accept_0]})", flush=True)
    with atomic_write(os.path.join(a.out, f"{kind}.pt")) as f:
        torch.save({k: v.detach().cpu().clone() for k, v in heads.state_dict().items()}, f)
    summary = {"steps": step, "train_seconds": wall, **counts,
               "top1": top1, "acceptance": accept, "initial_top1": top1_0, "initial_acceptance": accept_0,
               "loss_weights": "equal (Medusa's train_legacy.py)", "args": vars(a)}
    with atomic_write(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if a.export:
        (write_tessera_hawk if a.vertical else write_tessera)(heads.cpu(), a.export, "f16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
