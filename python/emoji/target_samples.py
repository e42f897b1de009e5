"""The training data of the drafters and heads that read the target (train_eagle.py,
train_medusa.py): sequences the tessera engine samples from the target itself, and the target's
hidden states over them."""
import glob
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
from tessera_ref.llamagen import caption_mask, load_tessera_gpt  # noqa: E402


def conditions(a, gpt):
    """What the target is sampled for: a class-conditional target's class ids (classes.json's
    training classes where the model has one, as the emoji target does; else every class), a
    text-conditional one's caption feature files (--captions DIR: one .npy per caption, the
    [T, caption_dim] T5 features `tessera generate --caption` reads)."""
    if gpt.model_type == "c2i":
        if os.path.exists(os.path.join(a.target, "classes.json")):
            conds = training_classes(a.target)
        else:
            conds = list(range(gpt.num_classes))
    else:
        if not a.captions:
            sys.exit(f"error: {a.target} is text-to-image: give --captions DIR (caption features, one .npy "
                     "per caption, as tessera generate --caption reads them)")
        conds = sorted(glob.glob(os.path.join(a.captions, "*.npy")))
        if not conds:
            sys.exit(f"error: --captions {a.captions}: no .npy caption feature files")
    return conds[:a.max_classes] if a.max_classes else conds


def sample(tessera, target_dir, conds, per_class, cache):
    """[N, n_tokens] int64 tokens and [N] indices into conds, sampled by the engine (cached per
    condition)."""
    os.makedirs(cache, exist_ok=True)
    toks, labs = [], []
    t0 = time.time()
    for i, c in enumerate(conds):
        if isinstance(c, int):
            path, what, seed = os.path.join(cache, f"c{c}_n{per_class}.npy"), ["--class", str(c)], 1000 + c
        else:
            stem = os.path.splitext(os.path.basename(c))[0]
            path, what, seed = os.path.join(cache, f"t{i}_{stem}_n{per_class}.npy"), ["--caption", c], 1000 + i
        if not os.path.exists(path):
            tmp = path + ".tmp.npy"
            subprocess.run([tessera, "generate", "-q", "-m", target_dir, *what, "-n", str(per_class),
                            "-b", str(per_class), "-s", str(seed), "--tokens-out", tmp],
                           check=True, stdout=subprocess.DEVNULL)
            os.replace(tmp, path)
        a = np.load(path).reshape(per_class, -1)
        toks.append(torch.from_numpy(a.astype(np.int64)))
        labs.append(torch.full((per_class,), i, dtype=torch.long))
        if (i + 1) % 100 == 0:
            print(f"samples: {i + 1}/{len(conds)} conditions ({time.time() - t0:.0f}s)", flush=True)
    return torch.cat(toks), torch.cat(labs)


def prefix(gpt, conds, idx):
    """The prefix embeddings [B, T, dim] of conditions conds[idx] (idx -1: the null condition, CFG's
    unguided half) and which prefix rows are keys [B, T] (a caption's all-zero padding rows are
    not, as in the engine and LlamaGen's t2i)."""
    dev = gpt.tok_embeddings.weight.device
    if gpt.model_type == "c2i":
        lab = torch.tensor([gpt.num_classes if i < 0 else conds[i] for i in idx.tolist()], device=dev)
        return gpt.cls_embedding.embedding_table(lab)[:, None], torch.ones(len(idx), 1, dtype=torch.bool, device=dev)
    caps, valid = [], []
    for i in idx.tolist():
        if i < 0:
            caps.append(gpt.cls_embedding.uncond_embedding)
            valid.append(torch.ones(gpt.cls_token_num, dtype=torch.bool, device=dev))
        else:
            c = torch.from_numpy(np.load(conds[i]).astype(np.float32)).to(dev)
            caps.append(c)
            valid.append(caption_mask(c)[0])
    return gpt.cls_embedding(torch.stack(caps))[:, :gpt.cls_token_num], torch.stack(valid)


@torch.no_grad()
def target_features(gpt, conds, idx, tokens, batch=64):
    """Post-norm hidden states [N, n_tokens, dim] (f16, on the CPU): f_i is the target's feature at
    the row whose logits predict image token i (i = 0: the prefix's last row)."""
    out = []
    dev = gpt.tok_embeddings.weight.device
    for s in range(0, len(idx), batch):
        tok = tokens[s:s + batch].to(dev)
        pre, valid = prefix(gpt, conds, idx[s:s + batch])
        T = pre.shape[1]
        h = torch.cat([pre, gpt.tok_embeddings(tok[:, :-1])], 1)
        L = h.shape[1]
        # Causal, the prefix's padding rows hidden from every query, each row attending to itself.
        keys = torch.cat([valid, torch.ones(len(tok), L - T, dtype=torch.bool, device=dev)], 1)
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool, device=dev)) & keys[:, None, :]
        mask |= torch.eye(L, dtype=torch.bool, device=dev)
        fc = gpt.freqs_cis[:L].to(dev)
        for layer in gpt.layers:
            h = layer(h, fc, None, mask[:, None])
        out.append(gpt.norm(h)[:, T - 1:].half().cpu())
    return torch.cat(out)


def add_run_args(ap, what):
    """The flags every trainer on the target's samples shares: data, schedule, run."""
    ap.add_argument("--target", required=True, help="tessera model directory of the target")
    ap.add_argument("--tessera", required=True, help="the tessera binary that samples the data")
    ap.add_argument("--out", required=True, help=f"run directory: samples, log, {what}")
    ap.add_argument("--export", help=f"write the trained {what} here as a tessera directory (f16)")
    ap.add_argument("--captions", help="text-to-image targets: a directory of caption features, one .npy "
                    "([T, caption_dim] T5 features) per caption")
    ap.add_argument("--samples-per-class", type=int, default=6, help="samples per class or caption")
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
    ap.add_argument("--device", default="cpu", help="torch device of the target's features and the "
                    "training, e.g. cuda")


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
    gpt = load_tessera_gpt(a.target).eval().to(a.device)
    for p in gpt.parameters():
        p.requires_grad_(False)
    classes = conditions(a, gpt)
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
    tr_lab = torch.cat([tr_lab, torch.full((len(null),), -1, dtype=torch.long)])  # the null condition
    t1 = time.time()
    subset = f"_q{len(tokens)}" if a.sequences else ""
    cache = os.path.join(a.out, f"features_n{a.samples_per_class}_c{len(classes)}{subset}_s{a.seed}.pt")
    if os.path.exists(cache):
        tr_feat, ev_feat = torch.load(cache)
    else:
        tr_feat = target_features(gpt, classes, tr_lab, tr_tok)
        ev_feat = target_features(gpt, classes, ev_lab, ev_tok)
        with atomic_write(cache) as f:
            torch.save((tr_feat, ev_feat), f)
    print(f"{len(tokens)} sampled sequences ({t1 - t0:.0f}s), {len(tr_tok)} training rows with "
          f"{len(null)} null-class copies, {n_eval} held out; features in {time.time() - t1:.0f}s", flush=True)
    counts = {"sequences": len(tokens), "held_out": n_eval, "null_copies": len(null)}
    return gpt, (tr_feat, tr_tok), (ev_feat, ev_tok), counts
