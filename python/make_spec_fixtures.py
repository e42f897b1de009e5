#!/usr/bin/python3
"""Deterministically builds the small random-weight LlamaGen models used by the speculative-decoding
tests (official checkpoint layout, converted with tools/convert_llamagen.py) under
tests/fixtures/spec/:

  micro_target/  c2i, vocab 4, grid 2 (4 image tokens), dim 32, 2 layers, 3 classes, with a VQ decoder
  micro_draft/   same vocab/grid/classes, dim 16, 1 layer (draft for micro_target)
  tiny_draft/    dim 32, 1 layer, vocab 256, grid 4, 10 classes: draft for tests/fixtures/llamagen/c2i_f32

The micro target's 4^4 = 256 sequences are small enough to enumerate its full joint distribution,
so its init scales are chosen for non-degenerate next-token distributions. At the end the script
prints distribution statistics measured with the PyTorch reference (tessera_ref.llamagen).

  /usr/bin/python3 python/make_spec_fixtures.py [--out DIR]

Running it twice gives byte-identical files (fixed seeds; the .pt checkpoints go to a temp dir).
"""
import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_test_fixtures as mtf  # noqa: E402
from tessera_ref.llamagen import (ModelArgs, Transformer, VQArgs, VQModel, VQDecoderModel,  # noqa: E402
                                  forward_logits, top_k_top_p_filtering, to_uint8)

OUT = os.path.join(ROOT, "tests", "fixtures", "spec")
TINY_TARGET_PT = os.path.join(ROOT, "tests", "fixtures", "llamagen", "pt", "c2i_gpt.pt")
PY = sys.executable or "/usr/bin/python3"

SEED = 20240601

# micro models: vocab 4 (VQ codebook 4 x 8), image 8 / downsample 4 -> grid 2, 3 classes
MICRO = dict(vocab_size=4, image_size=8, downsample=4, num_classes=3)
MICRO_TARGET = dict(MICRO, dim=32, n_layer=2, n_head=2)
MICRO_DRAFT = dict(MICRO, dim=16, n_layer=1, n_head=2)
# draft for the tiny c2i target of make_test_fixtures.py (dim 64, 2 layers, vocab 256, grid 4)
TINY_DRAFT = dict(vocab_size=mtf.TINY["vocab_size"], image_size=mtf.TINY["image_size"],
                  downsample=mtf.TINY["downsample"], num_classes=mtf.TINY["num_classes"],
                  dim=32, n_layer=1, n_head=2)
# VQ decoder for micro_target: every channel count a multiple of the 32 GroupNorm groups,
# ch_mult of length 3 -> upsamples by 4 = downsample.
MICRO_VQ = dict(codebook_size=4, codebook_embed_dim=8, z_channels=32, ch=32, ch_mult=[1, 1, 1],
                num_res_blocks=1)

# Logit scale: output.weight std is OUT_SCALE / sqrt(dim) (make_test_fixtures uses 0.5 for every
# dim); tuned so the micro target's next-token max-probabilities sit mostly in 0.35-0.8.
MICRO_TARGET_OUT_SCALE = 0.9
MICRO_DRAFT_OUT_SCALE = 0.9
# seed of each model's generator; the micro draft's was picked among SEED + 1 + 1000 k, k < 8, as
# the one whose average TV to the target (cfg 1, raw softmax) is closest to 0.3
SEEDS = dict(micro_target=SEED, micro_draft=SEED + 7001, vq=SEED + 2, tiny_draft=SEED + 3)
TINY_DRAFT_OUT_SCALE = 0.5 * 64 ** 0.5   # the same logit scale as the tiny target (0.5 at dim 64)

# test sampling settings the statistics are reported for
TOP_K, TOP_P = 3, 0.9


def grid(cfg):
    return cfg["image_size"] // cfg["downsample"]


def gpt_args(cfg):
    n = grid(cfg) ** 2
    return ModelArgs(dim=cfg["dim"], n_layer=cfg["n_layer"], n_head=cfg["n_head"], vocab_size=cfg["vocab_size"],
                     num_classes=cfg["num_classes"], model_type="c2i", cls_token_num=1, block_size=n)


@torch.no_grad()
def make_gpt(cfg, g, out_scale):
    m = Transformer(gpt_args(cfg)).eval()
    mtf.init_gpt(m, g)
    # init_gpt draws output.weight with std 0.5; rescale to out_scale / sqrt(dim)
    m.output.weight.mul_(out_scale / cfg["dim"] ** 0.5 / 0.5)
    return m


def convert(pt, out, cfg, vq_pt=None):
    cmd = [PY, os.path.join(ROOT, "tools", "convert_llamagen.py"), "--gpt", pt, "--out", out,
           "--gpt-model", "custom", "--dim", str(cfg["dim"]), "--n-layer", str(cfg["n_layer"]),
           "--n-head", str(cfg["n_head"]), "--image-size", str(cfg["image_size"]),
           "--downsample", str(cfg["downsample"]), "--model-type", "c2i",
           "--num-classes", str(cfg["num_classes"]), "--vocab-size", str(cfg["vocab_size"]),
           "--dtype", "f32"]
    if vq_pt is not None:
        cmd += ["--vq", vq_pt, "--vq-model", "custom", "--vq-dtype", "f32"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"converter failed ({r.returncode}): {r.stderr.strip()}")
    print("  " + r.stdout.strip().replace(ROOT + os.sep, "").replace("\n", "\n  "))


# ----------------------------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def prefix_logits(model, cond, n):
    """{prefix tuple: next-token logits [V]} for every prefix of length 0..n-1 over the full vocab
    (teacher forcing of every length-(n-1) sequence)."""
    V = model.vocab_size
    out = {}
    for seq in itertools.product(range(V), repeat=n - 1):
        rows = forward_logits(model, cond, list(seq))
        for i in range(n):
            out.setdefault(seq[:i], rows[i])
    return out


def guided(cond_logits, uncond_logits, cfg):
    return cond_logits if cfg == 1.0 else uncond_logits + (cond_logits - uncond_logits) * cfg


def filtered_probs(logits, temperature=1.0, top_k=0, top_p=1.0):
    lg = (logits / temperature).clone().unsqueeze(0)
    if top_k > 0 or top_p < 1.0:
        lg = top_k_top_p_filtering(lg, top_k=top_k, top_p=top_p)
    return F.softmax(lg, dim=-1)[0]


def tv(p, q):
    return 0.5 * float((p - q).abs().sum())


def micro_stats(target, draft, ncls, n):
    """Per (class, cfg): next-token statistics over all prefixes of the micro target, and the
    draft-vs-target total variation (raw softmax and with the test top-k / top-p filtering)."""
    tu = prefix_logits(target, None, n)
    du = prefix_logits(draft, None, n)
    rows = []
    for c in range(ncls):
        tc = prefix_logits(target, c, n)
        dc = prefix_logits(draft, c, n)
        for cfg in (1.0, 2.0, 3.0):
            mx, mn, tvs, tvf, in_band, above = [], [], [], [], 0, 0
            joint = {}
            for pre in tc:
                pt = F.softmax(guided(tc[pre], tu[pre], cfg), -1)
                pd = F.softmax(guided(dc[pre], du[pre], cfg), -1)
                mx.append(float(pt.max()))
                mn.append(float(pt.min()))
                in_band += 0.35 <= mx[-1] <= 0.8
                above += mn[-1] >= 0.02
                tvs.append(tv(pt, pd))
                ft = filtered_probs(guided(tc[pre], tu[pre], cfg), 1.0, TOP_K, TOP_P)
                fd = filtered_probs(guided(dc[pre], du[pre], cfg), 1.0, TOP_K, TOP_P)
                tvf.append(tv(ft, fd))
                joint[pre] = ft
            # full joint distribution under the test sampling settings
            probs = []
            for seq in itertools.product(range(target.vocab_size), repeat=n):
                p = 1.0
                for i in range(n):
                    p *= float(joint[seq[:i]][seq[i]])
                probs.append(p)
            pj = torch.tensor(probs, dtype=torch.float64)
            k = len(mx)
            rows.append(dict(cls=c, cfg=cfg, n=k, max_avg=sum(mx) / k, max_min=min(mx), max_max=max(mx),
                             min_avg=sum(mn) / k, min_min=min(mn), in_band=in_band / k, above=above / k,
                             tv_avg=sum(tvs) / k, tv_max=max(tvs), tvf_avg=sum(tvf) / k,
                             support=int((pj > 0).sum()), joint_max=float(pj.max()),
                             joint_H=float(-(pj[pj > 0] * pj[pj > 0].log()).sum())))
    return rows


@torch.no_grad()
def tiny_stats(target, draft, ncls, n, g, nseq=16):
    """Draft-vs-target TV along random token sequences, per class, cfg 1 and 4."""
    res = []
    for cfg in (1.0, 4.0):
        tvs, tmax, dmax = [], [], []
        for c in range(ncls):
            for _ in range(nseq):
                seq = torch.randint(0, target.vocab_size, (n - 1,), generator=g).tolist()
                tc, tu = forward_logits(target, c, seq), forward_logits(target, None, seq)
                dc, du = forward_logits(draft, c, seq), forward_logits(draft, None, seq)
                for i in range(n):
                    pt = F.softmax(guided(tc[i], tu[i], cfg), -1)
                    pd = F.softmax(guided(dc[i], du[i], cfg), -1)
                    tvs.append(tv(pt, pd))
                    tmax.append(float(pt.max()))
                    dmax.append(float(pd.max()))
        k = len(tvs)
        res.append(dict(cfg=cfg, n=k, tv_avg=sum(tvs) / k, tv_min=min(tvs), tv_max=max(tvs),
                        tmax_avg=sum(tmax) / k, dmax_avg=sum(dmax) / k))
    return res


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT, help="output directory (default tests/fixtures/spec)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)

    with torch.no_grad():
        gen = lambda k: torch.Generator().manual_seed(SEEDS[k])  # noqa: E731
        micro_target = make_gpt(MICRO_TARGET, gen("micro_target"), MICRO_TARGET_OUT_SCALE)
        micro_draft = make_gpt(MICRO_DRAFT, gen("micro_draft"), MICRO_DRAFT_OUT_SCALE)
        vq = VQModel(VQArgs(**MICRO_VQ)).eval()
        mtf.init_vq(vq, gen("vq"))
        tiny_draft = make_gpt(TINY_DRAFT, gen("tiny_draft"), TINY_DRAFT_OUT_SCALE)

    out = os.path.abspath(args.out)
    tmp = tempfile.mkdtemp(prefix="tessera_spec_")
    try:
        pts = {}
        for name, m in (("micro_target", micro_target), ("micro_draft", micro_draft), ("tiny_draft", tiny_draft)):
            pts[name] = os.path.join(tmp, name + ".pt")
            torch.save({"model": m.state_dict()}, pts[name])
        vq_pt = os.path.join(tmp, "vq.pt")
        torch.save({"model": {k: v for k, v in vq.state_dict().items() if not k.startswith("encoder.")}}, vq_pt)
        for name in ("micro_target", "micro_draft", "tiny_draft"):
            d = os.path.join(out, name)
            if os.path.isdir(d):
                shutil.rmtree(d)
        print(f"converting into {out}")
        convert(pts["micro_target"], os.path.join(out, "micro_target"), MICRO_TARGET, vq_pt)
        convert(pts["micro_draft"], os.path.join(out, "micro_draft"), MICRO_DRAFT)
        convert(pts["tiny_draft"], os.path.join(out, "tiny_draft"), TINY_DRAFT)
    finally:
        shutil.rmtree(tmp)

    # ---- statistics (PyTorch reference)
    n = grid(MICRO) ** 2
    print(f"\nmicro_target next-token distributions over all {sum(4 ** i for i in range(n))} prefixes "
          f"(temperature 1, unfiltered unless noted); draft = micro_draft")
    print("  cls cfg | max-prob avg [min, max]  in[0.35,0.8] | min-prob avg  min  >=0.02 | "
          "TV(draft) avg  max  top-k/p avg | joint(top-k 3, top-p 0.9): support  max  entropy")
    rows = micro_stats(micro_target, micro_draft, MICRO["num_classes"], n)
    for r in rows:
        print(f"  {r['cls']}   {r['cfg']:.0f}   |  {r['max_avg']:.3f} [{r['max_min']:.3f}, {r['max_max']:.3f}]   "
              f"{r['in_band'] * 100:5.1f}%     |  {r['min_avg']:.3f}    {r['min_min']:.3f}  {r['above'] * 100:5.1f}%  |"
              f"  {r['tv_avg']:.3f}  {r['tv_max']:.3f}   {r['tvf_avg']:.3f}      |"
              f"  {r['support']:3d}  {r['joint_max']:.3f}  {r['joint_H']:.2f} nats")
    c1 = [r for r in rows if r["cfg"] == 1.0]
    print(f"  cfg 1, classes 0-2: max-prob avg {sum(r['max_avg'] for r in c1) / len(c1):.3f}, "
          f"min-prob avg {sum(r['min_avg'] for r in c1) / len(c1):.3f}, "
          f"TV(draft, target) avg {sum(r['tv_avg'] for r in c1) / len(c1):.3f}")

    tiny_target = Transformer(mtf.gpt_args("c2i")).eval()
    tiny_target.load_state_dict(torch.load(TINY_TARGET_PT, map_location="cpu")["model"])
    nt = grid(TINY_DRAFT) ** 2
    print(f"\ntiny_draft vs tests/fixtures/llamagen/c2i_f32 (16 random sequences per class, all {nt} positions)")
    for r in tiny_stats(tiny_target, tiny_draft, TINY_DRAFT["num_classes"], nt, torch.Generator().manual_seed(7)):
        print(f"  cfg {r['cfg']:.0f}: TV avg {r['tv_avg']:.3f} [{r['tv_min']:.3f}, {r['tv_max']:.3f}], "
              f"max-prob avg target {r['tmax_avg']:.3f} draft {r['dmax_avg']:.3f} ({r['n']} contexts)")

    # ---- VQ decoder sanity on two token grids
    dec = VQDecoderModel(VQArgs(**MICRO_VQ)).eval()
    dec.load_state_dict({k: v for k, v in vq.state_dict().items()
                         if k.startswith(("decoder.", "post_quant_conv.", "quantize.embedding."))})
    with torch.no_grad():
        px = to_uint8(dec.decode_code(torch.tensor([[0, 1, 2, 3], [3, 3, 0, 1]]))).float()
    print(f"\nmicro_target VQ: pixels mean {px.mean():.1f} std {px.std():.1f} "
          f"saturated {float(((px == 0) | (px == 255)).float().mean()) * 100:.1f}%")

    total = 0
    for dp, _, fns in os.walk(out):
        for fn in sorted(fns):
            total += os.path.getsize(os.path.join(dp, fn))
    print(f"\nwrote {out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
