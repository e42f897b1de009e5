"""The training data of the drafters and heads that read the target (train_eagle.py,
train_medusa.py): sequences the tessera engine samples from the target itself, and the target's
hidden states over them."""
import os
import subprocess
import sys
import time

import numpy as np
import torch

from common import seed_all
from distill_draft import training_classes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tessera_ref.atomic_io import atomic_write  # noqa: E402
from tessera_ref.llamagen import load_tessera_gpt  # noqa: E402


def sample(tessera, target_dir, classes, per_class, cache):
    """[N, 256] int64 tokens and [N] labels, sampled by the engine (cached per class)."""
    os.makedirs(cache, exist_ok=True)
    toks, labs = [], []
    t0 = time.time()
    for i, c in enumerate(classes):
        path = os.path.join(cache, f"c{c}_n{per_class}.npy")
        if not os.path.exists(path):
            tmp = path + ".tmp.npy"
            subprocess.run([tessera, "generate", "-q", "-m", target_dir, "--class", str(c), "-n", str(per_class),
                            "-b", str(per_class), "-s", str(1000 + c), "--tokens-out", tmp],
                           check=True, stdout=subprocess.DEVNULL)
            os.replace(tmp, path)
        a = np.load(path).reshape(per_class, -1)
        toks.append(torch.from_numpy(a.astype(np.int64)))
        labs.append(torch.full((per_class,), c, dtype=torch.long))
        if (i + 1) % 100 == 0:
            print(f"samples: {i + 1}/{len(classes)} classes ({time.time() - t0:.0f}s)", flush=True)
    return torch.cat(toks), torch.cat(labs)


@torch.no_grad()
def target_features(gpt, labels, tokens, batch=64):
    """Post-norm hidden states [N, 256, dim] (f16): f_i is the target's feature at sequence
    position i (i = 0: the class token), whose logits predict image token i."""
    out = []
    for s in range(0, len(labels), batch):
        lab, tok = labels[s:s + batch], tokens[s:s + batch]
        h = torch.cat([gpt.cls_embedding.embedding_table(lab)[:, None], gpt.tok_embeddings(tok[:, :-1])], 1)
        fc = gpt.freqs_cis[:h.shape[1]]
        for layer in gpt.layers:
            h = layer(h, fc, None, "causal")
        out.append(gpt.norm(h).half())
    return torch.cat(out)


def add_run_args(ap, what):
    """The flags every trainer on the target's samples shares: data, schedule, run."""
    ap.add_argument("--target", required=True, help="tessera model directory of the target")
    ap.add_argument("--tessera", required=True, help="the tessera binary that samples the data")
    ap.add_argument("--out", required=True, help=f"run directory: samples, log, {what}")
    ap.add_argument("--export", help=f"write the trained {what} here as a tessera directory (f16)")
    ap.add_argument("--samples-per-class", type=int, default=6)
    ap.add_argument("--sequences", type=int, default=0, help="use this many of the samples (0: all)")
    ap.add_argument("--max-classes", type=int, default=0, help="only the first N training classes (smoke tests)")
    ap.add_argument("--eval-fraction", type=float, default=0.05)
    ap.add_argument("--null-prob", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--minutes", type=float, default=1e9)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)


def prepare_run(a):
    """Seeds, threads and the run directory; the frozen target; its samples split into training
    and held-out sequences (a --null-prob share of the training ones copied with the null class,
    the unguided half of CFG); their post-norm features, cached in the run directory (about as
    costly as the training: 20 minutes on 2 cores for 5k sequences).
    Returns gpt, (tr_feat, tr_tok), (ev_feat, ev_tok) and the counts for the run's summary."""
    seed_all(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    gpt = load_tessera_gpt(a.target).eval()
    for p in gpt.parameters():
        p.requires_grad_(False)
    classes = training_classes(a.target)
    if a.max_classes:
        classes = classes[:a.max_classes]
    t0 = time.time()
    tokens, labels = sample(a.tessera, a.target, classes, a.samples_per_class, os.path.join(a.out, "samples"))
    perm = torch.randperm(len(tokens))
    if a.sequences:
        perm = perm[:a.sequences]
    tokens, labels = tokens[perm], labels[perm]
    n_eval = max(1, int(len(tokens) * a.eval_fraction))
    ev_tok, ev_lab = tokens[:n_eval], labels[:n_eval]
    tr_tok, tr_lab = tokens[n_eval:], labels[n_eval:]
    null = torch.where(torch.rand(len(tr_tok)) < a.null_prob)[0]
    tr_tok = torch.cat([tr_tok, tr_tok[null]])
    tr_lab = torch.cat([tr_lab, torch.full((len(null),), gpt.num_classes, dtype=torch.long)])
    t1 = time.time()
    subset = f"_q{len(tokens)}" if a.sequences else ""
    cache = os.path.join(a.out, f"features_n{a.samples_per_class}_c{len(classes)}{subset}_s{a.seed}.pt")
    if os.path.exists(cache):
        tr_feat, ev_feat = torch.load(cache)
    else:
        tr_feat = target_features(gpt, tr_lab, tr_tok)
        ev_feat = target_features(gpt, ev_lab, ev_tok)
        with atomic_write(cache) as f:
            torch.save((tr_feat, ev_feat), f)
    print(f"{len(tokens)} sampled sequences ({t1 - t0:.0f}s), {len(tr_tok)} training rows with "
          f"{len(null)} null-class copies, {n_eval} held out; features in {time.time() - t1:.0f}s", flush=True)
    counts = {"sequences": len(tokens), "held_out": n_eval, "null_copies": len(null)}
    return gpt, (tr_feat, tr_tok), (ev_feat, ev_tok), counts
