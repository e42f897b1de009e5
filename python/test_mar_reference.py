#!/usr/bin/python3
"""Self-check of the MAR Python side: converter round trip and validation errors, the mask
schedule and diffusion tables against values computed from LTH14/mar (models/mar.py,
diffusion/), the golden files under
tests/fixtures/mar against a fresh run of the reference, and sample_tokens against a hand-written
one-token-per-step loop over forward_mae + sample_diffusion.

  /usr/bin/python3 python/test_mar_reference.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import make_mar_fixtures as fx  # noqa: E402
from tessera_ref.mar import (diffusion_tables, mar_expected, mask_schedule, sample_diffusion,  # noqa: E402
                             sample_tokens, to_uint8, vae_expected)
from tessera_ref.safetensors_io import read_safetensors, write_safetensors  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
FIX = fx.OUT
GOLD = os.path.join(FIX, "golden")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def run_convert(mar, out, arch=None, dtype="f32", vae=None, extra=(), flags=None):
    cmd = [PY, fx.CONVERTER, "--mar", mar, "--vae", vae or os.path.join(FIX, "pt", "vae.ckpt"),
           "--out", out, "--dtype", dtype]
    cmd += fx.converter_flags(arch or fx.TARGET) if flags is None else flags
    cmd += list(extra)
    return subprocess.run(cmd, capture_output=True, text=True)


def same(a, b):
    return a.dtype == b.dtype and list(a.shape) == list(b.shape) and torch.equal(a, b)


def test_converter(tmp):
    ck = torch.load(os.path.join(FIX, "pt", "target.pth"), map_location="cpu")
    ema, raw = ck["model_ema"], ck["model"]
    vck = torch.load(os.path.join(FIX, "pt", "vae.ckpt"), map_location="cpu")["model"]
    vkeys = set(vae_expected(fx.vae_args()))
    check(not torch.equal(ema["fake_latent"], raw["fake_latent"]), "fixture: model and model_ema differ")

    for dt, tdt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        out = os.path.join(tmp, f"t_{dt}")
        r = run_convert(os.path.join(FIX, "pt", "target.pth"), out, dtype=dt)
        check(r.returncode == 0, f"convert target {dt} exits 0 {r.stderr.strip()}")
        if r.returncode != 0:
            continue
        st = read_safetensors(os.path.join(out, "mar.safetensors"))
        check(set(st) == set(ema) == set(mar_expected(fx.target_args())),
              f"{dt}: mar.safetensors has exactly the official state-dict keys")
        check(all(same(st[k], ema[k].to(tdt)) for k in ema if k in st),
              f"{dt}: every MAR tensor equals the {'exact' if dt == 'f32' else dt + '-rounded'} model_ema tensor "
              f"(official shapes, e.g. mask_token {list(st['mask_token'].shape)})")
        vst = read_safetensors(os.path.join(out, "vae.safetensors"))
        check(set(vst) == vkeys, f"{dt}: vae.safetensors holds exactly post_quant_conv.* + decoder.* "
              f"({len(vst)} tensors; encoder./quant_conv./loss. dropped)")
        check(all(same(vst[k], vck[k].to(tdt)) for k in vkeys if k in vst), f"{dt}: VAE tensors equal the ckpt")
        cfg = json.load(open(os.path.join(out, "config.json")))
        want = {"tessera_format": 1, "architecture": "mar",
                "mar": {"file": "mar.safetensors", "dtype": dt, "dim": 64, "encoder_depth": 2, "decoder_depth": 2,
                        "n_head": 4, "mlp_ratio": 4.0, "num_classes": 10, "buffer_size": 4, "image_size": 64,
                        "vae_stride": 16, "patch_size": 1, "vae_embed_dim": 16, "norm_eps": 1e-06,
                        "diffloss_depth": 2, "diffloss_width": 64, "num_train_timesteps": 1000,
                        "num_sampling_steps": 100, "noise_schedule": "cosine"},
                "vae": {"file": "vae.safetensors", "dtype": dt, "embed_dim": 16, "z_channels": 16, "ch": 16,
                        "ch_mult": [1, 1, 1, 1, 2], "num_res_blocks": 1, "attn_resolutions": [],
                        "norm_groups": 16, "norm_eps": 1e-06, "scale": 0.2325}}
        check(cfg == want and list(cfg["mar"]) == list(want["mar"]) and list(cfg["vae"]) == list(want["vae"]),
              f"{dt}: config.json matches the contract")

    out = os.path.join(tmp, "t_noema")
    r = run_convert(os.path.join(FIX, "pt", "target.pth"), out, extra=["--no-ema"])
    check(r.returncode == 0, f"--no-ema exits 0 {r.stderr.strip()}")
    if r.returncode == 0:
        st = read_safetensors(os.path.join(out, "mar.safetensors"))
        check(all(same(st[k], raw[k]) for k in raw), "--no-ema converts 'model' (not 'model_ema')")

    # safetensors inputs (HF jadechoghari/mar style single copies) and a bare state dict
    mst, vst_in = os.path.join(tmp, "mar-tiny.safetensors"), os.path.join(tmp, "kl-tiny.safetensors")
    write_safetensors(mst, list(ema.items()))
    write_safetensors(vst_in, [(k, v) for k, v in vck.items() if v.dim() > 0])
    out = os.path.join(tmp, "t_st")
    r = run_convert(mst, out, vae=vst_in)
    check(r.returncode == 0, f"safetensors MAR + VAE inputs exit 0 {r.stderr.strip()}")
    if r.returncode == 0:
        st = read_safetensors(os.path.join(out, "mar.safetensors"))
        check(all(same(st[k], ema[k]) for k in ema), "safetensors MAR round trip")
    bare = os.path.join(tmp, "bare.pth")
    torch.save(ema, bare)
    r = run_convert(bare, os.path.join(tmp, "t_bare"))
    check(r.returncode == 0, f"bare state dict accepted {r.stderr.strip()}")

    # draft
    r = run_convert(os.path.join(FIX, "pt", "draft.pth"), os.path.join(tmp, "d"), arch=fx.DRAFT)
    check(r.returncode == 0, f"convert draft exits 0 {r.stderr.strip()}")

    # ---- errors
    def expect_error(r, needle, what):
        msg = r.stderr.strip()
        check(r.returncode == 2 and needle in msg and "Traceback" not in msg and len(msg.splitlines()) == 1
              and msg.startswith("error: "), f"{what}: exit {r.returncode}, message: {msg}")

    def bad_ckpt(sd):
        p = os.path.join(tmp, "bad.pth")
        torch.save({"model": raw, "model_ema": sd}, p)
        return p

    expect_error(run_convert(os.path.join(tmp, "nope.pth"), os.path.join(tmp, "o")), "nope.pth", "missing file")
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"),
                             vae=os.path.join(tmp, "nope.ckpt")), "nope.ckpt", "missing VAE file")
    sd = dict(ema)
    del sd["decoder_blocks.1.mlp.fc2.bias"]
    expect_error(run_convert(bad_ckpt(sd), os.path.join(tmp, "o")), "decoder_blocks.1.mlp.fc2.bias", "missing tensor")
    sd = dict(ema)
    sd["diffloss.net.res_blocks.0.adaLN_modulation.1.weight"] = torch.zeros(100, 64)
    expect_error(run_convert(bad_ckpt(sd), os.path.join(tmp, "o")),
                 "diffloss.net.res_blocks.0.adaLN_modulation.1.weight", "wrong shape")
    sd = dict(ema)
    sd["encoder_blocks.0.attn.q_norm.weight"] = torch.zeros(16)
    expect_error(run_convert(bad_ckpt(sd), os.path.join(tmp, "o")), "encoder_blocks.0.attn.q_norm.weight",
                 "unexpected tensor")
    vsd = dict(vck)
    vsd["decoder.up.0.attn.0.q.weight"] = torch.zeros(32, 32, 1, 1)
    p = os.path.join(tmp, "badvae.ckpt")
    torch.save({"model": vsd}, p)
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"), vae=p),
                 "decoder.up.0.attn.0.q.weight", "unexpected VAE tensor")
    vsd = dict(vck)
    del vsd["decoder.up.3.block.0.nin_shortcut.weight"]
    torch.save({"model": vsd}, p)
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"), vae=p),
                 "decoder.up.3.block.0.nin_shortcut.weight", "missing VAE tensor")
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"), dtype="f8"),
                 "f8", "bad --dtype")
    p = os.path.join(tmp, "noema.pth")
    torch.save({"model": raw}, p)
    expect_error(run_convert(p, os.path.join(tmp, "o")), "--no-ema", "checkpoint without model_ema")
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"), flags=[]),
                 "mar_base", "tiny checkpoint converted as the mar_base preset")
    expect_error(run_convert(os.path.join(FIX, "pt", "target.pth"), os.path.join(tmp, "o"),
                             extra=["--diffloss-d", "3"]), "--diffloss-d 2", "wrong --diffloss-d gets a hint")


def test_tables():
    s64, s256, s32, s16 = (mask_schedule(256, n) for n in (64, 256, 32, 16))
    lead = next(i for i, c in enumerate(s64) if c != 1)
    check(s64[:12] == [1] * 12 and sum(s64) == 256 and len(s64) == 64 and max(s64[-8:]) <= 7,
          f"num_iter 64: first 12 steps 1 token each (in fact the first {lead}), sum 256, last {s64[-4:]}")
    check(s256 == [1] * 256, "num_iter 256: one token per step")
    check(s32[:6] == [1, 1, 1, 2, 3, 4] and sum(s32) == 256 and s32[-1] in (12, 13),
          f"num_iter 32: {s32[:6]} ... {s32[-1]}")
    check(s16[:4] == [2, 3, 7, 8] and s16[-1] == 25 and sum(s16) == 256, f"num_iter 16: {s16}")
    check(mask_schedule(16, 16) == [1] * 16, "L=16, num_iter 16: one token per step (fixture setting)")
    for it in (64, 256, 32, 16):
        g = np.load(os.path.join(GOLD, f"mask_schedule_L256_iter{it}.npy"))
        check(g.dtype == np.int32 and g.tolist() == mask_schedule(256, it), f"golden mask_schedule_L256_iter{it}")
    tb = diffusion_tables(100, 1000)
    tm = tb.timestep_map.tolist()
    check(len(tm) == 100 and tm[:7] == [0, 10, 20, 30, 40, 50, 61] and tm[-4:] == [969, 979, 989, 999]
          and tm == [round(k * 999 / 99) for k in range(100)], f"respaced timesteps {tm[:7]} ... {tm[-4:]}")
    check(abs(tb.betas[0] - 4.13e-5) < 5e-8 and abs(tb.betas[1] - 6.80e-4) < 1e-6
          and abs(tb.betas[98] - 0.7499) < 1e-4 and abs(tb.betas[99] - 0.99999) < 1e-6
          and abs(tb.alphas_cumprod[99] - 2.43e-9) < 1e-11,
          f"beta'_0 {tb.betas[0]:.4g} beta'_1 {tb.betas[1]:.4g} beta'_98 {tb.betas[98]:.4g} "
          f"beta'_99 {tb.betas[99]:.6g} abar'_99 {tb.alphas_cumprod[99]:.3g}")
    s = np.exp(0.5 * tb.posterior_log_variance_clipped)
    check(abs(s[0] - 0.00624) < 5e-5 and abs(np.sqrt(tb.betas[0]) - 0.00643) < 5e-5 and abs(s[50] - 0.182) < 1e-3,
          f"sigma ranges: sigma_min(0) {s[0]:.5f} sigma_max(0) {np.sqrt(tb.betas[0]):.5f} sigma_min(50) {s[50]:.4f}")
    g = np.load(os.path.join(GOLD, "diffusion_tables.npy"))
    # 1e-14 relative, not bit-equal: numpy's SIMD log/exp differ in the last ulp between CPUs
    # (AVX2 vs AVX-512 builds of the same numpy gave 2e-16 apart).
    check(g.dtype == np.float64 and g.shape == (100, 6) and np.allclose(g, tb.as_matrix(), rtol=1e-14, atol=0),
          "golden diffusion_tables")


def test_goldens():
    target, draft, vae = fx.load_pt_models()
    inp = {n: np.load(os.path.join(GOLD, n)) for n in os.listdir(GOLD) if n.endswith(".npy")}
    fresh = fx.compute_goldens(target, draft, vae, inp)
    for name, arr in sorted(fresh.items()):
        g = inp[name]
        ok = g.shape == arr.shape and g.dtype == arr.dtype
        if ok and arr.dtype == np.uint8:
            ok = int(np.abs(g.astype(int) - arr.astype(int)).max()) <= 1
        elif ok:
            ok = np.allclose(g, arr, rtol=1e-5, atol=1e-6)
        check(ok, f"golden {name} {list(arr.shape)} {arr.dtype} reproduces")
    px = to_uint8(torch.from_numpy(inp["vae_image.npy"]))
    check(np.array_equal(px, inp["vae_pixels.npy"]), "vae_pixels == to_uint8(vae_image) exactly")
    check(np.allclose(inp["diff_mean_logvar_j0.npy"][:, :16], inp["diff_x0_cfg.npy"]),
          "diff_mean_logvar_j0 mean part == diff_x0_cfg (no noise at j=0)")
    # float32 run of the reference against the float64 goldens: the tolerance a float32 engine needs
    labels = torch.from_numpy(inp["gen_labels.npy"])
    orders = torch.from_numpy(inp["gen_orders.npy"])
    t32 = sample_tokens(target, labels, 4, 2.0, "linear", 1.0, orders, torch.from_numpy(inp["gen_noise.npy"]),
                        torch.from_numpy(inp["gen_eps.npy"])).numpy()
    d = np.abs(t32 - inp["gen_tokens_iter4_cfg2_linear.npy"]).max()
    check(d < 1e-3, f"float32 reference vs float64 golden gen_tokens_iter4_cfg2_linear: max abs diff {d:.2e}")
    net = target.diffloss.net
    x32 = sample_diffusion(net, torch.from_numpy(inp["diff_z.npy"]), torch.from_numpy(inp["diff_z_uncond.npy"]),
                           3.0, 0.9, torch.from_numpy(inp["diff_xT.npy"]), torch.from_numpy(inp["diff_eps.npy"]))
    d = np.abs(x32.numpy() - inp["diff_x0_cfg.npy"]).max()
    check(d < 1e-3, f"float32 reference vs float64 golden diff_x0_cfg: max abs diff {d:.2e}")


@torch.no_grad()
def test_loop_consistency():
    """sample_tokens with L=16 and num_iter=16 predicts one token per step: redo it by hand."""
    target, _, _ = fx.load_pt_models()
    m = target.double()
    g = torch.Generator().manual_seed(7)
    B, L, T, S = 2, m.seq_len, m.token_dim, 100
    labels = torch.tensor([1, 8])
    orders = torch.stack([torch.randperm(L, generator=g) for _ in range(B)])
    noise = torch.randn(B, L, T, generator=g, dtype=torch.float64)
    eps = torch.randn(B, L, S, T, generator=g, dtype=torch.float64)
    net = m.diffloss.net
    for cfg, temp in ((1.0, 0.95), (2.5, 1.0)):
        got = sample_tokens(m, labels, L, cfg, "linear", temp, orders, noise, eps)
        tokens = torch.zeros(B, L, T, dtype=torch.float64)
        mask = torch.ones(B, L, dtype=torch.float64)
        for s in range(L):
            k = orders[:, L - 1 - s]                           # unmasked from the tail of the order
            zc = m.forward_mae(tokens, mask, m.class_embedding(labels))[torch.arange(B), k]
            zu = None
            if cfg != 1.0:
                zu = m.forward_mae(tokens, mask, m.fake_latent.expand(B, -1))[torch.arange(B), k]
            mask_len = max(1, L - 1 - s)
            scale = float(np.float32(1 + (cfg - 1) * (L - mask_len) / L))
            x = sample_diffusion(net, zc, zu, scale, temp, noise[torch.arange(B), k],
                                 eps[torch.arange(B), k].permute(1, 0, 2))
            tokens[torch.arange(B), k] = x
            mask[torch.arange(B), k] = 0
        d = (got - tokens).abs().max().item()
        check(d < 1e-12, f"sample_tokens == hand-written loop (cfg {cfg}, temp {temp}, one token/step): max diff {d:.1e}")


def main():
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if not os.path.isdir(GOLD):
        print(f"FAIL  {GOLD} missing: run python/make_mar_fixtures.py")
        return 1
    with tempfile.TemporaryDirectory(prefix="tessera_test_mar_") as tmp:
        test_converter(tmp)
    test_tables()
    test_goldens()
    test_loop_consistency()
    print(f"{len(FAILS)} failure(s)" if FAILS else "all ok")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
