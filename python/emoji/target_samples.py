"""The training data of the drafters and heads that read the target (train_eagle.py,
train_medusa.py): sequences the tessera engine samples from the target itself, and the target's
hidden states over them."""
import os
import subprocess
import time

import numpy as np
import torch


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
