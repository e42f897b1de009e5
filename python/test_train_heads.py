#!/usr/bin/env python3
"""The heads' training script (python/emoji/train_medusa.py) on a target other than the emoji one:
the text-to-image fixture (tests/fixtures/llamagen/t2i_f32: 4x4 grid, 8 caption rows), with
caption features given as --captions DIR (issue 43: "works for any LlamaGen target").

It checks what a wrong generalisation would get wrong:
  - the features the heads train on are the target's hidden states at the rows the engine's
    heads read: their logits through the LM head equal the reference's teacher-forced logits
    (python/tessera_ref/llamagen.py forward_logits, golden-tested against the engine) for two
    captions, one with padding rows, and the null caption;
  - training Hawk's heads runs, raises their held-out top-1 agreement, and the exported heads
    draft in the engine for hawk and for lantern++ (LANTERN++ on Hawk's pools);
  - a text-to-image target without --captions is refused in one line.
Usage: /usr/bin/python3 python/test_train_heads.py path/to/tessera"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.abspath(__file__))
EMOJI = os.path.join(ROOT, "emoji")
sys.path.insert(0, EMOJI)
sys.path.insert(0, ROOT)
from target_samples import target_features  # noqa: E402
from tessera_ref.llamagen import forward_logits, load_tessera_gpt  # noqa: E402

TARGET = os.path.join(ROOT, "..", "tests", "fixtures", "llamagen", "t2i_f32")
CAPTION = os.path.join(ROOT, "..", "tests", "fixtures", "llamagen", "golden", "caption.npy")


def main():
    tessera = os.path.abspath(sys.argv[1])
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        caps = os.path.join(tmp, "captions")
        os.makedirs(caps)
        cap = np.load(CAPTION).astype(np.float32)
        padded = cap.copy()
        padded[:3] = 0.0  # padding rows: not keys, in the engine and in LlamaGen
        np.save(os.path.join(caps, "a.npy"), cap)
        np.save(os.path.join(caps, "b.npy"), padded)
        conds = [os.path.join(caps, "a.npy"), os.path.join(caps, "b.npy")]

        # Features: the LM head over f_i gives the teacher-forced logits that predict token i.
        gpt = load_tessera_gpt(TARGET).eval()
        n = gpt.block_size
        tokens = torch.randint(0, gpt.vocab_size, (3, n))
        feats = target_features(gpt, conds, torch.tensor([0, 1, -1]), tokens)
        assert feats.shape == (3, n, gpt.config.dim), feats.shape
        with torch.no_grad():
            got = gpt.output(feats.float())
        for k, c in enumerate([cap, padded, None]):
            want = forward_logits(gpt, c, tokens[k, :n - 1])
            err = float((got[k] - want).abs().max())
            assert err < 2e-2 * float(want.abs().max()), f"condition {k}: features off by {err}"
        print("features match the reference's teacher-forced logits")

        # Hawk's heads trained on the engine's samples for these captions, then drafting.
        run_dir, heads = os.path.join(tmp, "run"), os.path.join(tmp, "hawk")
        cmd = [sys.executable, os.path.join(EMOJI, "train_medusa.py"), "--target", TARGET, "--tessera", tessera,
               "--out", run_dir, "--captions", caps, "--samples-per-class", "8", "--heads", "2", "--vertical", "1",
               "--batch", "4", "--steps", "40", "--warmup", "2", "--lr", "1e-2", "--eval-every", "20",
               "--eval-fraction", "0.25", "--export", heads]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"train_medusa.py failed:\n{r.stdout}\n{r.stderr}"
        s = json.load(open(os.path.join(run_dir, "summary.json")))
        assert s["sequences"] == 16 and len(s["top1"]) == 3, s
        assert sum(s["top1"]) > sum(s["initial_top1"]), s
        cfg = json.load(open(os.path.join(heads, "config.json")))
        assert cfg["architecture"] == "hawk" and cfg["hawk"]["row_width"] == 4, cfg
        for method in ("hawk", "lantern++"):
            g = subprocess.run([tessera, "generate", "-m", TARGET, "--caption", conds[0], "--method", method,
                                "--draft", heads, "-n", "2", "--tokens-out", os.path.join(tmp, "t.npy"), "-q"],
                               capture_output=True, text=True)
            assert g.returncode == 0, f"{method}: {g.stderr}"
        print(f"trained and drafted: held-out top-1 {s['initial_top1']} -> {s['top1']}")

        # Without captions: one line naming the flag.
        r = subprocess.run(cmd[:cmd.index("--captions")] + ["--steps", "1"], capture_output=True, text=True)
        assert r.returncode != 0 and "--captions" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
