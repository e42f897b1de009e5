#!/usr/bin/env python3
"""CI check of python/tessera_eval (FID and CLIP score for real models; docs/quality.md), with
nothing downloaded:
  1. FID through torchmetrics with a small feature network, the emoji classifier's 256-d
     penultimate features (models/emoji/classifier), on emoji PNGs made by `tessera generate`,
     against an independent numpy/scipy Frechet distance of the same features; a folder and the
     folder's saved statistics (.npz) as the reference give the same FID;
  2. the CLIP score through torchmetrics' CLIPScore with a tiny randomly initialised CLIP (built
     from a transformers config, saved locally), against a manual cosine of its embeddings, with
     each image's text read from tessera's PNG metadata (the prompt, or the class's name);
  3. bad input: one line naming the problem and exit status 1.
Needs torchmetrics and transformers (scripts/setup-deps.sh installs them in a venv).
Usage: /opt/tessera-eval-venv/bin/python3 python/test_tessera_eval.py path/to/tessera"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "emoji"))
from classifier import load as load_classifier, to_input  # noqa: E402
from tessera_eval.__main__ import main as tessera_eval_main  # noqa: E402

CLASSIFIER = os.path.join(ROOT, "models", "emoji", "classifier")
TARGET = os.path.join(ROOT, "models", "emoji", "target")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))


def generate(tessera, out, *args):
    subprocess.run([tessera, "generate", "-m", TARGET, "-q", "-o", out, *args], check=True)


class Result:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


def eval_cli(*args):
    """`python3 -m tessera_eval ARGS`, in this process (one torch import for the whole test)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = tessera_eval_main(list(args))
    return Result(code, err.getvalue())


def eval_subprocess(*args):
    """The same as a separate process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "tessera_eval", *args], env=ENV, capture_output=True, text=True)


def pngs(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".png"))


def features_of(folder):
    """The classifier's features straight from python/emoji/classifier.py (no tessera_eval)."""
    pixels = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in pngs(folder)])
    with torch.no_grad():
        return load_classifier(CLASSIFIER).features(to_input(pixels)).numpy().astype(np.float64)


def frechet_gram(a, b):
    """Frechet distance with tr((S_a S_b)^1/2) as the sum of the singular values of
    A B^T / sqrt((n-1)(m-1)) for the centred feature matrices (exact for n, m < d)."""
    ac, bc = a - a.mean(0), b - b.mean(0)
    n, m = len(a), len(b)
    tr_sqrt = np.linalg.svd(ac @ bc.T / np.sqrt((n - 1) * (m - 1)), compute_uv=False).sum()
    return float(((a.mean(0) - b.mean(0)) ** 2).sum() + (ac ** 2).sum() / (n - 1) + (bc ** 2).sum() / (m - 1)
                 - 2 * tr_sqrt)


def frechet_sqrtm(a, b):
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    return float(((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(s1) + np.trace(s2)
                 - 2 * np.trace(scipy.linalg.sqrtm(s1 @ s2).real))


def check_fid(gen, ref, tmp):
    want = frechet_gram(features_of(gen), features_of(ref))
    alt = frechet_sqrtm(features_of(gen), features_of(ref))
    out = os.path.join(tmp, "fid.json")
    r = eval_cli("fid", gen, ref, "--classifier", CLASSIFIER, "--json", out)
    assert r.returncode == 0, r.stderr
    got = json.load(open(out))
    assert got["n"] == len(pngs(gen)) and got["reference_n"] == len(pngs(ref)), got
    # torchmetrics returns the FID in the features' dtype (f32) and takes tr (S_a S_b)^1/2 from
    # eigenvalues of the product of two rank-deficient covariances: 1e-4 relative covers both.
    assert abs(got["fid"] - want) <= 1e-4 * want, (got["fid"], want, alt)
    assert abs(alt - want) <= 1e-4 * want, (alt, want)
    print(f"FID (classifier features) {got['fid']:.5f}, numpy {want:.5f}, scipy sqrtm {alt:.5f}")

    # The reference as saved statistics: the same FID.
    stats = os.path.join(tmp, "ref.npz")
    r = eval_subprocess("stats", ref, "-o", stats, "--classifier", CLASSIFIER)
    assert r.returncode == 0, r.stderr
    z = np.load(stats)
    f_ref = features_of(ref)
    assert int(z["n"]) == len(f_ref)
    assert np.allclose(z["mu"], f_ref.mean(0), rtol=0, atol=1e-5)
    assert np.allclose(z["sigma"], np.cov(f_ref, rowvar=False), rtol=0, atol=1e-5)
    r = eval_cli("fid", gen, stats, "--classifier", CLASSIFIER, "--json", out)
    assert r.returncode == 0, r.stderr
    from_stats = json.load(open(out))["fid"]
    assert abs(from_stats - got["fid"]) <= 1e-5 * want, (from_stats, got["fid"])
    # A set against itself: 0 up to rounding.
    r = eval_cli("fid", ref, ref, "--classifier", CLASSIFIER, "--json", out)
    assert r.returncode == 0 and abs(json.load(open(out))["fid"]) < 1e-3 * want, r.stderr
    print(f"FID against the saved statistics {from_stats:.5f}")
    return stats


def tiny_clip(directory, seed):
    """A randomly initialised CLIP (2 layers of width 32 per tower) with a byte-level tokenizer
    (no merges), saved as a local model directory for CLIPScore."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer
    from transformers.models.clip.tokenization_clip import bytes_to_unicode
    chars = list(bytes_to_unicode().values())
    vocab = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    ids = {t: i for i, t in enumerate(vocab)}
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.json"), "w") as f:
        json.dump(ids, f)
    with open(os.path.join(directory, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    tok = CLIPTokenizer(os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt"),
                        clean_up_tokenization_spaces=False)
    bos, eos = ids["<|startoftext|>"], ids["<|endoftext|>"]
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    cfg = CLIPConfig(text_config=dict(vocab_size=len(vocab), max_position_embeddings=77, bos_token_id=bos,
                                      eos_token_id=eos, pad_token_id=eos, **small),
                     vision_config=dict(image_size=32, patch_size=8, **small), projection_dim=16)
    torch.manual_seed(seed)
    model = CLIPModel(cfg).eval()
    proc = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                            crop_size={"height": 32, "width": 32}),
                         tokenizer=tok)
    model.save_pretrained(directory)
    proc.save_pretrained(directory)
    return model, proc


def manual_clip_scores(model, proc, files, texts):
    """100 * max(cos(E_image, E_text), 0) from the model's own embeddings."""
    out = []
    with torch.no_grad():
        for path, text in zip(files, texts):
            x = proc(images=Image.open(path).convert("RGB"), return_tensors="pt")
            t = proc.tokenizer([text], return_tensors="pt", padding=True)
            e_i = model.get_image_features(x["pixel_values"])[0]
            e_t = model.get_text_features(t["input_ids"], t["attention_mask"])[0]
            out.append(100 * max(float(e_i @ e_t / (e_i.norm() * e_t.norm())), 0.0))
    return out


def check_clip(gen, tmp, class_name):
    model_dir = os.path.join(tmp, "tiny-clip")
    files = pngs(gen)
    # The texts tessera recorded: the prompt as typed (apple_*), or the class's name (c12_*, which
    # records only the class id and the model, whose classes.json names it).
    texts = ["an emoji of " + ("red apple" if os.path.basename(f).startswith("apple") else class_name)
             for f in files]
    # A random CLIP's cosines are as often negative (score 0) as positive: take the first seed that
    # gives some positive scores, so that the comparison is not one of zeros.
    for seed in range(20):
        model, proc = tiny_clip(model_dir, seed)
        manual = manual_clip_scores(model, proc, files, texts)
        if max(manual) > 1.0:
            break
    assert max(manual) > 1.0, manual
    out = os.path.join(tmp, "clip.json")
    r = eval_cli("clip", gen, "--model", model_dir, "--template", "an emoji of {}", "--json", out)
    assert r.returncode == 0, r.stderr
    got = json.load(open(out))
    assert [i["file"] for i in got["images"]] == files
    assert [i["text"] for i in got["images"]] == texts, [i["text"] for i in got["images"]]
    scores = [i["clip_score"] for i in got["images"]]
    assert np.allclose(scores, manual, rtol=0, atol=1e-3), (scores, manual)
    assert abs(got["clip_score"] - np.mean(manual)) < 1e-3, (got["clip_score"], manual)
    print(f"CLIP score (tiny random CLIP, seed {seed}) per image {np.round(scores, 3).tolist()}, "
          f"manual {np.round(manual, 3).tolist()}")


def check_errors(gen, stats, tmp):
    cases = [
        (["fid", os.path.join(tmp, "missing"), gen, "--classifier", CLASSIFIER], "not a folder"),
        (["fid", gen, gen, "--classifier", TARGET], "no classifier.json"),
        (["fid", gen, os.path.join(tmp, "tiny-clip", "vocab.json"), "--classifier", CLASSIFIER],
         "cannot read reference statistics"),
        (["clip", gen, "--model", os.path.join(tmp, "no-such-model")], "cannot load the CLIP model"),
        (["clip", gen, "--model", os.path.join(tmp, "tiny-clip"), "--template", "emoji"], "has no {}"),
    ]
    for i, (args, want) in enumerate(cases):
        r = (eval_subprocess if i == 0 else eval_cli)(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and want in lines[0], (args, r.returncode, r.stderr)
    print("errors ok")


def main():
    tessera = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        gen, ref = os.path.join(tmp, "gen"), os.path.join(tmp, "ref")
        os.makedirs(gen)
        os.makedirs(ref)
        generate(tessera, os.path.join(gen, "apple.png"), "red apple", "-n", "3", "-s", "1")
        generate(tessera, os.path.join(gen, "c12.png"), "--class", "12", "-n", "2", "-s", "2")
        generate(tessera, os.path.join(ref, "banana.png"), "banana", "-n", "4", "-s", "3")
        class_name = json.load(open(os.path.join(TARGET, "classes.json")))["classes"][12]["name"]
        stats = check_fid(gen, ref, tmp)
        check_clip(gen, tmp, class_name)
        check_errors(gen, stats, tmp)
    print("tessera_eval ok")


if __name__ == "__main__":
    main()
