#!/usr/bin/env python3
"""Train an EAGLE drafter (Li et al., 2024; LANTERN's LlamaGen variant, python/tessera_ref/eagle.py)
for a tessera LlamaGen target, on the target's own samples and hidden states.

  1. Samples: --samples-per-class sequences of every training class, drawn by the tessera engine
     itself at the target's default settings (`tessera generate --class C --tokens-out`, seed
     1000 + C), cached in RUN/samples/; the last --eval-fraction of them measure the drafter.
  2. Features: the target's last hidden state after its final norm (the feature EAGLE reads),
     teacher-forced over every sequence, with the sequence's class; a --null-prob share of the
     sequences is featurised again with the null class (the unguided half of CFG; LANTERN drops
     the condition for 10% of its data). Held in memory as f16.
  3. Training (EAGLE-1 section 3.2 / LANTERN's train_drafter): draft row i reads (f_i, x_i) and
     predicts f_{i+1}; loss = SmoothL1(f^_{i+1}, f_{i+1}) + --p-weight x soft cross-entropy of the
     target's distribution softmax(head(f_{i+1})) against softmax(head(f^_{i+1})), the head being
     the target's frozen LM head; uniform noise of width --noise on the input features. The
     token embedding is the target's, frozen. AdamW (0.9, 0.95), warm-up then cosine over a fixed
     wall time or step count.
  4. Logs the held-out depth-1 acceptance E[1 - TV(p, q)] (exact speculative decoding's chance of
     accepting the drafted token) and top-1 agreement; writes the drafter in LANTERN's layout
     (RUN/lantern/: config.json + pytorch_model.bin) and converts it with tools/convert_eagle.py
     (--export DIR, f16).

  python3 python/emoji/train_eagle.py --target models/emoji/target --tessera build/tessera \\
      --out RUNS/eagle --minutes 45 --export models/emoji/eagle
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import Log
from target_samples import add_run_args, prepare_run
from train_gpt import adamw, scheduled_lr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import convert_eagle  # noqa: E402
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.eagle import EagleArgs, EagleDrafter  # noqa: E402


def drafter_for(gpt, norm_eps):
    c = gpt.config
    a = EagleArgs(dim=c.dim, n_head=c.n_head, n_kv_head=c.n_kv_head or c.n_head, ffn_dim=c.hidden_dim(),
                  vocab_size=c.vocab_size, norm_eps=norm_eps, rope_base=c.rope_base, grid=gpt.grid_size,
                  prefix_len=c.cls_token_num - 1)
    d = EagleDrafter(a)
    for p in d.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    with torch.no_grad():
        d.embed_tokens.weight.copy_(gpt.tok_embeddings.weight)
        # Start from "the next feature is this one" (the feature half of fc the identity, the
        # residual branches' outputs zero): a prediction that already carries the target's
        # distribution, which training refines.
        D = c.dim
        d.fc.weight.zero_()
        d.fc.weight[:, D:] = torch.eye(D)
        d.fc.bias.zero_()
        d.layers[0].self_attn.o_proj.weight.zero_()
        d.layers[0].mlp.down_proj.weight.zero_()
    d.embed_tokens.weight.requires_grad_(False)
    return d


def losses(d, head, feats, tokens, noise):
    """feats [B, 256, H] f32 (f_0..f_255), tokens [B, 256]. Rows i = 0..254: (f_i, x_i) -> f_{i+1}."""
    x = feats[:, :-1]
    if noise > 0:
        x = x + (torch.rand_like(x) - 0.5) * noise
    pos = torch.arange(d.args.prefix_len, d.args.prefix_len + x.shape[1])
    pred, _ = d(x, tokens[:, :-1], pos)
    true = feats[:, 1:]
    vloss = F.smooth_l1_loss(pred, true)
    logq = F.log_softmax(head(pred), -1)
    with torch.no_grad():
        p = F.softmax(head(true), -1)
    ploss = -(p * logq).sum(-1).mean()
    return vloss, ploss, p, logq


@torch.no_grad()
def measure(d, head, feats, tokens, batch=64):
    acc, agree, n = 0.0, 0.0, 0
    for s in range(0, len(tokens), batch):
        _, _, p, logq = losses(d, head, feats[s:s + batch].float(), tokens[s:s + batch], 0.0)
        acc += float(torch.minimum(p, logq.exp()).sum(-1).sum())
        agree += float((p.argmax(-1) == logq.argmax(-1)).sum())
        n += p.shape[0] * p.shape[1]
    return acc / n, agree / n


def lantern_config(d):
    a = d.args
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.dim,
            "intermediate_size": a.ffn_dim, "num_attention_heads": a.n_head, "num_key_value_heads": a.n_kv_head,
            "num_hidden_layers": 1, "vocab_size": a.vocab_size, "rms_norm_eps": a.norm_eps,
            "rope_theta": a.rope_base, "hidden_act": "silu", "input_type": "c2i"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, "checkpoints")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--p-weight", type=float, default=0.1, help="weight of the distribution loss (EAGLE: 0.1)")
    ap.add_argument("--noise", type=float, default=0.2, help="width of the uniform input-feature noise")
    ap.add_argument("--norm-eps", type=float, default=1e-6)
    ap.add_argument("--init", help="start from this drafter state dict (LANTERN layout, e.g. an earlier RUN/lantern/pytorch_model.bin)")
    a = ap.parse_args()
    gpt_cfg = json.load(open(os.path.join(a.target, "config.json")))["gpt"]
    if gpt_cfg["model_type"] != "c2i" or a.device != "cpu":
        sys.exit("error: train_eagle.py trains EAGLE drafters (LANTERN's c2i layout) for class-conditional "
                 "targets on the CPU; train_medusa.py trains heads for text-to-image targets and on a GPU")
    gpt, (tr_feat, tr_tok), (ev_feat, ev_tok), counts = prepare_run(a)

    d = drafter_for(gpt, a.norm_eps)
    if a.init:  # continue from a drafter this script wrote (RUN/lantern/pytorch_model.bin)
        d.load_state_dict(torch.load(a.init), strict=True)
    head = gpt.output
    opt = adamw([p for p in d.parameters() if p.requires_grad], a.lr, 0.0)
    log = Log(os.path.join(a.out, "eagle_log.tsv"))
    acc0, agree0 = measure(d, head, ev_feat, ev_tok)
    log(0, acceptance=acc0, top1=agree0)
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
        vloss, ploss, _, _ = losses(d, head, tr_feat[pick].float(), tr_tok[pick], a.noise)
        loss = vloss + a.p_weight * ploss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_value_([p for p in d.parameters() if p.requires_grad], 0.5)
        opt.step()
        if step % 20 == 0:
            print(f"step {step}: vloss {float(vloss):.4f} ploss {float(ploss):.4f} "
                  f"({time.time() - t_train:.0f}s)", flush=True)
        if step % a.eval_every == 0:
            acc, agree = measure(d, head, ev_feat, ev_tok)
            log(step, acceptance=acc, top1=agree, vloss=float(vloss), ploss=float(ploss))
    acc, agree = measure(d, head, ev_feat, ev_tok)
    log(step, acceptance=acc, top1=agree)
    wall = time.time() - t_train
    print(f"trained {step} steps in {wall:.0f}s: held-out depth-1 acceptance {acc:.3f} (start {acc0:.3f}), "
          f"top-1 agreement {agree:.3f}", flush=True)

    lantern = os.path.join(a.out, "lantern")
    os.makedirs(lantern, exist_ok=True)
    with atomic_write(os.path.join(lantern, "pytorch_model.bin")) as f:
        torch.save({k: v.detach().clone() for k, v in d.state_dict().items()}, f)
    with atomic_write(os.path.join(lantern, "config.json"), "w") as f:
        json.dump(lantern_config(d), f, indent=2)
    summary = {"steps": step, "train_seconds": wall, **counts,
               "acceptance": acc, "top1": agree, "initial_acceptance": acc0, "args": vars(a)}
    with atomic_write(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if a.export:
        rc = convert_eagle.main(["--drafter", lantern, "--target", a.target, "--out", a.export, "--dtype", "f16"])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
