#!/usr/bin/python3
"""Deterministically builds tiny random-weight MAR models (target, draft) and a tiny KL VAE in the
official checkpoint layout, converts them with tools/convert_mar.py and writes golden outputs of the
reference (python/tessera_ref/mar.py) under tests/fixtures/mar/.

  /usr/bin/python3 python/make_mar_fixtures.py [--seed N]

Goldens are computed in float64 (every weight is the exact float32 value promoted to float64; the
diffusion tables are rounded to float32 before use as in the official code) and stored as float32
unless stated otherwise in golden/manifest.json.

The DiffLoss MLPs get a structured random init (see init_diffnet): an untrained random MLP predicts
an eps unrelated to x_t, and the sampler's first respaced step multiplies x_t - eps by
1/sqrt(alpha'_99) = 316, which makes the chains explode to |x| ~ 1e4. Here eps ~= x_t + delta(z, t)
with delta ~ 0 at t = 999 and O(0.5) at low t, so x_0 stays O(1) while every weight is random and
exercised, the output depends on z, on t and on the CFG scale, and v spans about [-1.5, 1.5].
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tessera_ref.dedupe import link_identical  # noqa: E402
from tessera_ref.mar import (MAR, KLDecoder, MarArgs, VAEArgs, diffusion_tables, mask_schedule,  # noqa: E402
                             net_output, sample_diffusion, sample_tokens, to_uint8, vae_decode)

OUT = os.path.join(ROOT, "tests", "fixtures", "mar")
PY = sys.executable or "/usr/bin/python3"
CONVERTER = os.path.join(ROOT, "tools", "convert_mar.py")

COMMON = dict(num_classes=10, buffer_size=4, img_size=64, vae_stride=16, patch_size=1, vae_embed_dim=16)
TARGET = dict(dim=64, encoder_depth=2, decoder_depth=2, n_head=4, diffloss_depth=2, diffloss_width=64)
DRAFT = dict(dim=32, encoder_depth=1, decoder_depth=1, n_head=2, diffloss_depth=1, diffloss_width=32)
VAE = dict(embed_dim=16, z_channels=16, ch=16, ch_mult=[1, 1, 1, 1, 2], num_res_blocks=1, attn_resolutions=[],
           resolution=COMMON["img_size"], norm_groups=16, norm_eps=1e-6, scale=0.2325)
TIME_IDX = 90   # sinusoid channel cos(t * f_90), f_90 = 1e4^(-90/128): ~0.03 at t=999, 1 at t=0


def target_args():
    return MarArgs(**COMMON, **TARGET)


def draft_args():
    return MarArgs(**COMMON, **DRAFT)


def vae_args():
    return VAEArgs(**VAE)


def converter_flags(arch):
    """tools/convert_mar.py flags for a tiny architecture (overrides of the mar_base preset)."""
    return ["--model", "mar_base", "--dim", str(arch["dim"]), "--encoder-depth", str(arch["encoder_depth"]),
            "--decoder-depth", str(arch["decoder_depth"]), "--n-head", str(arch["n_head"]),
            "--diffloss-d", str(arch["diffloss_depth"]), "--diffloss-w", str(arch["diffloss_width"]),
            "--num-classes", str(COMMON["num_classes"]), "--buffer-size", str(COMMON["buffer_size"]),
            "--img-size", str(COMMON["img_size"]), "--vae-stride", str(COMMON["vae_stride"]),
            "--patch-size", str(COMMON["patch_size"]), "--vae-embed-dim", str(COMMON["vae_embed_dim"]),
            "--vae-ch", str(VAE["ch"]), "--vae-ch-mult", ",".join(str(m) for m in VAE["ch_mult"]),
            "--vae-num-res-blocks", str(VAE["num_res_blocks"]), "--vae-z-channels", str(VAE["z_channels"]),
            "--vae-norm-groups", str(VAE["norm_groups"])]


# ----------------------------------------------------------------------------------------------
# random initialisation
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def init_diffnet(net, g, B=100.0, s_res=0.5, s_gate=0.2, s_shift=0.5, s_fsc=0.01, s_v=0.8, tiny=1e-4):
    W, T = net.input_proj.weight.shape
    D = net.cond_embed.weight.shape[1]

    def rn(*s):
        return torch.randn(*s, generator=g)

    # zero-mean orthonormal basis: P (token subspace of the width-W stream), q (large bias direction)
    M = rn(W, T + 1).double()
    Q, _ = torch.linalg.qr(M - M.mean(0, keepdim=True))
    P, q = Q[:, :T], Q[:, T]
    p_perp = (torch.eye(W, dtype=torch.float64) - P @ P.t()).float()
    q_perp = (torch.eye(W, dtype=torch.float64) - torch.outer(q, q)).float()
    P, q = P.float(), q.float()
    # h = P x + B q: the final LayerNorm is then ~linear in x and k P^T recovers eps ~= x
    net.input_proj.weight.copy_(P)
    net.input_proj.bias.copy_(B * q)
    # channel 0 of y carries only time: y0(t) = silu(3 cos(t f_90)) (no z); other channels random
    te = net.time_embed.mlp
    w0, b0 = rn(W, 256) / 16, 0.1 * rn(W)
    w0[0], b0[0] = 0, 0
    w0[0, TIME_IDX] = 3.0
    te[0].weight.copy_(w0)
    te[0].bias.copy_(b0)
    w2, b2 = rn(W, W) / W ** 0.5, 0.1 * rn(W)
    w2[0], b2[0] = 0, 0
    w2[0, 0] = 1.0
    te[2].weight.copy_(w2)
    te[2].bias.copy_(b2)
    wc, bc = rn(W, D) / D ** 0.5, 0.1 * rn(W)
    wc[0], bc[0] = 0, 0
    net.cond_embed.weight.copy_(wc)
    net.cond_embed.bias.copy_(bc)
    y0_999 = F.silu(torch.tensor(3.0 * math.cos(999 * math.exp(-math.log(10000) * TIME_IDX / 128))))
    su0 = F.silu(y0_999)   # silu(y0) at t = 999: gates below are ~0 there
    for blk in net.res_blocks:
        blk.in_ln.weight.copy_(1 + 0.2 * rn(W))
        blk.in_ln.bias.copy_(0.1 * rn(W))
        for lin in (blk.mlp[0], blk.mlp[2]):
            lin.weight.copy_(rn(W, W) / W ** 0.5)
            lin.bias.copy_(0.1 * rn(W))
        gv = s_gate * rn(W)
        w = torch.cat([s_res * rn(2 * W, W) / W ** 0.5, tiny * rn(W, W)])   # shift, scale, gate rows
        b = torch.cat([s_res * rn(2 * W), -gv * su0])
        w[2 * W:, 0] += gv
        blk.adaLN_modulation[1].weight.copy_(w)
        blk.adaLN_modulation[1].bias.copy_(b)
    fl = net.final_layer
    sv = s_fsc * rn(W)
    wsc = tiny * rn(W, W)
    wsc[:, 0] += sv
    # shift rows live outside the token subspace (they move v, not eps); scale is time-gated
    fl.adaLN_modulation[1].weight.copy_(torch.cat([p_perp @ (s_shift * rn(W, W) / W ** 0.5), wsc]))
    fl.adaLN_modulation[1].bias.copy_(torch.cat([p_perp @ (s_shift * rn(W)), -sv * su0]))
    k = math.sqrt(T + B * B) / W ** 0.5
    fl.linear.weight.copy_(torch.cat([k * P.t(), (s_v * rn(T, W) / W ** 0.5) @ q_perp]))
    fl.linear.bias.copy_(torch.cat([torch.zeros(T), 0.1 * rn(T)]))


@torch.no_grad()
def init_mar(m, g):
    for name, p in m.named_parameters():
        if name.startswith("diffloss."):
            continue
        r = torch.randn(p.shape, generator=g)
        if name in ("class_emb.weight", "fake_latent", "mask_token"):
            p.copy_(0.5 * r)
        elif name.endswith("pos_embed_learned"):
            p.copy_(0.3 * r)
        elif ("norm" in name or "_ln" in name) and name.endswith(".weight"):
            p.copy_(1.0 + 0.2 * r)
        elif name.endswith(".bias"):
            p.copy_(0.05 * r) if "norm" not in name and "_ln" not in name else p.copy_(0.1 * r)
        else:
            p.copy_(r / p.shape[1] ** 0.5)
    init_diffnet(m.diffloss.net, g)


@torch.no_grad()
def init_vae(m, g):
    for name, p in m.named_parameters():
        r = torch.randn(p.shape, generator=g)
        if ".norm" in name and name.endswith("weight"):
            p.copy_(1.0 + 0.2 * r)
        elif name.endswith("bias"):
            p.copy_(0.1 * r)
        else:
            p.copy_(r / p[0].numel() ** 0.5)
    m.decoder.conv_out.weight.mul_(0.5)


def perturbed(sd, g, scale=0.05):
    """The non-EMA 'model' weights: the EMA weights plus N(0, scale^2) noise."""
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in sd.items()}


# ----------------------------------------------------------------------------------------------
# golden inputs / outputs
# ----------------------------------------------------------------------------------------------

GEN_SETTINGS = {  # file -> (model, num_iter, cfg, cfg_schedule, temperature)
    "gen_tokens_iter4_cfg2_linear.npy": ("target", 4, 2.0, "linear", 1.0),
    "gen_tokens_iter16_cfg1.npy": ("target", 16, 1.0, "linear", 0.95),
    "gen_tokens_iter8_cfg3_constant.npy": ("target", 8, 3.0, "constant", 1.0),
    "gen_tokens_draft_iter4_cfg2_linear.npy": ("draft", 4, 2.0, "linear", 1.0),
}
DIFF = dict(cfg=3.0, temperature_cfg=0.9, temperature_nocfg=1.0)


def make_inputs(g):
    L, T, S = target_args().seq_len, target_args().token_dim, 100
    inp = {}
    inp["mae_tokens.npy"] = torch.randn(2, L, T, generator=g).numpy()
    mask = np.ones((2, L), dtype=np.float32)
    mask[0, [0, 3, 6, 9, 12]] = 0          # 5 known tokens each, different positions
    mask[1, [1, 5, 10, 14, 15]] = 0
    inp["mae_mask.npy"] = mask
    inp["mae_labels.npy"] = np.array([3, -1], dtype=np.int32)
    inp["diff_z.npy"] = torch.randn(3, TARGET["dim"], generator=g).numpy()
    inp["diff_z_uncond.npy"] = torch.randn(3, TARGET["dim"], generator=g).numpy()
    inp["diff_xT.npy"] = torch.randn(3, T, generator=g).numpy()
    inp["diff_eps.npy"] = torch.randn(S, 3, T, generator=g).numpy()
    inp["vae_tokens.npy"] = torch.randn(2, L, T, generator=g).numpy()
    inp["gen_labels.npy"] = np.array([3, 7], dtype=np.int32)
    inp["gen_orders.npy"] = np.stack([torch.randperm(L, generator=g).numpy() for _ in range(2)]).astype(np.int32)
    inp["gen_noise.npy"] = torch.randn(2, L, T, generator=g).numpy()
    inp["gen_eps.npy"] = torch.randn(2, L, S, T, generator=g).numpy()
    return inp


def f64(a):
    return torch.from_numpy(np.asarray(a)).double()


@torch.no_grad()
def compute_goldens(target, draft, vae, inp):
    """target/draft: MAR (any dtype; evaluated as float64 copies), vae: KLDecoder, inp: make_inputs().
    Returns name -> numpy array (float32 unless integer)."""
    import copy
    t64 = copy.deepcopy(target).double().eval()
    d64 = copy.deepcopy(draft).double().eval()
    v64 = copy.deepcopy(vae).double().eval()
    out = {}
    f32 = lambda x: x.detach().numpy().astype(np.float32)  # noqa: E731
    # a. MAE forward
    ce = t64.class_embedding(torch.from_numpy(inp["mae_labels.npy"]))
    out["mae_z.npy"] = f32(t64.forward_mae(f64(inp["mae_tokens.npy"]), f64(inp["mae_mask.npy"]), ce))
    out["mae_z_allmasked.npy"] = f32(t64.forward_mae(f64(inp["mae_tokens.npy"]), torch.ones(2, t64.seq_len,
                                                     dtype=torch.float64), ce))
    # b. diffusion head
    net = t64.diffloss.net
    zc, zu = f64(inp["diff_z.npy"]), f64(inp["diff_z_uncond.npy"])
    xT, eps = f64(inp["diff_xT.npy"]), f64(inp["diff_eps.npy"])
    out["diff_netout_t999.npy"] = f32(net_output(net, xT, 999, zc))
    trace = []
    out["diff_x0_cfg.npy"] = f32(sample_diffusion(net, zc, zu, DIFF["cfg"], DIFF["temperature_cfg"], xT, eps,
                                                  trace=trace))
    last = trace[-1]
    assert last["j"] == 0
    out["diff_mean_logvar_j0.npy"] = f32(torch.cat([last["mean"], last["log_variance"]], dim=1))
    out["diff_x0_nocfg.npy"] = f32(sample_diffusion(net, zc, None, 1.0, DIFF["temperature_nocfg"], xT, eps))
    # c. VAE
    img = vae_decode(v64, f64(inp["vae_tokens.npy"]), scale=VAE["scale"], patch_size=COMMON["patch_size"])
    img32 = img.float()
    out["vae_image.npy"] = f32(img32)
    out["vae_pixels.npy"] = to_uint8(img32)      # from the stored float32 image
    # d. generation
    for name, (which, num_iter, cfg, sched, temp) in GEN_SETTINGS.items():
        m = t64 if which == "target" else d64
        toks = sample_tokens(m, torch.from_numpy(inp["gen_labels.npy"]), num_iter, cfg, sched, temp,
                             torch.from_numpy(inp["gen_orders.npy"]), f64(inp["gen_noise.npy"]),
                             f64(inp["gen_eps.npy"]))
        out[name] = f32(toks)
    # e. tables, f. schedules
    out["diffusion_tables.npy"] = diffusion_tables(100, 1000).as_matrix()
    for it in (64, 256, 32, 16):
        out[f"mask_schedule_L256_iter{it}.npy"] = np.array(mask_schedule(256, it), dtype=np.int32)
    return out


def tiny_models(seed):
    g = torch.Generator().manual_seed(seed)
    target = MAR(target_args()).eval()
    init_mar(target, g)
    draft = MAR(draft_args()).eval()
    init_mar(draft, g)
    vae = KLDecoder(vae_args()).eval()
    init_vae(vae, g)
    return g, target, draft, vae


def load_pt_models():
    """The tiny models as stored in tests/fixtures/mar/pt (EMA weights)."""
    target = MAR(target_args()).eval()
    target.load_state_dict(torch.load(os.path.join(OUT, "pt", "target.pth"), map_location="cpu")["model_ema"])
    draft = MAR(draft_args()).eval()
    draft.load_state_dict(torch.load(os.path.join(OUT, "pt", "draft.pth"), map_location="cpu")["model_ema"])
    vae = KLDecoder(vae_args()).eval()
    vsd = torch.load(os.path.join(OUT, "pt", "vae.ckpt"), map_location="cpu")["model"]
    vae.load_state_dict({k: v for k, v in vsd.items() if k.startswith(("decoder.", "post_quant_conv."))})
    return target, draft, vae


def convert(pt, out, arch, dtype="f32", extra=()):
    cmd = [PY, CONVERTER, "--mar", pt, "--vae", os.path.join(OUT, "pt", "vae.ckpt"), "--out", out,
           "--dtype", dtype] + converter_flags(arch) + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"converter failed ({r.returncode}): {r.stderr.strip()}")
    print("  " + r.stdout.strip().replace("\n", "\n  "))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))

    g, target, draft, vae = tiny_models(args.seed)
    inp = make_inputs(g)
    gold = compute_goldens(target, draft, vae, inp)

    # ---- write checkpoints
    for sub in ("pt", "golden", "target_f32", "target_f16", "draft_f32"):  # README.md stays
        shutil.rmtree(os.path.join(OUT, sub), ignore_errors=True)
    os.makedirs(os.path.join(OUT, "pt"))
    os.makedirs(os.path.join(OUT, "golden"))
    tsd = target.state_dict()
    torch.save({"model": perturbed(tsd, g), "model_ema": tsd, "epoch": 0},
               os.path.join(OUT, "pt", "target.pth"))
    dsd = draft.state_dict()
    torch.save({"model": perturbed(dsd, g), "model_ema": dsd, "epoch": 0},
               os.path.join(OUT, "pt", "draft.pth"))
    vsd = dict(vae.state_dict())
    # junk the converter must drop (the real kl16.ckpt also holds encoder / quant_conv / loss tensors)
    vsd["encoder.conv_in.weight"] = torch.randn(32, 3, 3, 3, generator=g)
    vsd["encoder.conv_in.bias"] = torch.zeros(32)
    vsd["quant_conv.weight"] = torch.randn(32, 32, 1, 1, generator=g)
    vsd["quant_conv.bias"] = torch.zeros(32)
    vsd["loss.logvar"] = torch.zeros(())
    torch.save({"model": vsd}, os.path.join(OUT, "pt", "vae.ckpt"))

    # ---- convert
    convert(os.path.join(OUT, "pt", "target.pth"), os.path.join(OUT, "target_f32"), TARGET)
    convert(os.path.join(OUT, "pt", "target.pth"), os.path.join(OUT, "target_f16"), TARGET, "f16")
    convert(os.path.join(OUT, "pt", "draft.pth"), os.path.join(OUT, "draft_f32"), DRAFT)
    link_identical(os.path.join(OUT, "target_f32", "vae.safetensors"), os.path.join(OUT, "draft_f32", "vae.safetensors"))

    # ---- goldens
    manifest = {
        "seed": args.seed, "torch_version": torch.__version__,
        "compute": "float64 reference (tessera_ref/mar.py) on the EMA weights promoted to float64; diffusion "
                   "tables rounded to float32 before use (official _extract_into_tensor(...).float()); "
                   "timestep sinusoid with float32 frequencies and float32 t*freq, cos/sin in float64; "
                   "linear cfg_iter rounded to float32. Outputs stored as float32.",
        "models": {
            "target": dict(COMMON, **TARGET, dir="target_f32 (f32), target_f16 (f16 storage)", weights="model_ema"),
            "draft": dict(COMMON, **DRAFT, dir="draft_f32", weights="model_ema"),
            "vae": dict(VAE, note="in every model dir as vae.safetensors; pt/vae.ckpt holds 5 junk "
                                  "encoder./quant_conv./loss. tensors the converter drops"),
            "seq_len": target_args().seq_len, "token_dim": target_args().token_dim,
            "num_sampling_steps": 100, "num_train_timesteps": 1000,
        },
        "files": {},
    }

    def desc(name, what, **kw):
        a = gold.get(name, inp.get(name))
        manifest["files"][name] = dict(what=what, shape=list(a.shape), dtype=str(a.dtype), **kw)

    for name, arr in list(inp.items()) + list(gold.items()):
        np.save(os.path.join(OUT, "golden", name), np.ascontiguousarray(arr))
    desc("mae_tokens.npy", "input: random latents [B, L, T] (known rows are the ones used)")
    desc("mae_mask.npy", "input: 1 = unknown; row 0 knows positions 0,3,6,9,12, row 1 knows 1,5,10,14,15")
    desc("mae_labels.npy", "input: class labels; -1 = use fake_latent (unconditional)")
    desc("mae_z.npy", "target forward_mae(mae_tokens, mae_mask, class_embedding(mae_labels))")
    desc("mae_z_allmasked.npy", "target forward_mae with an all-ones mask (first generation step), same labels")
    desc("diff_z.npy", "input: DiffLoss condition rows (cond)")
    desc("diff_z_uncond.npy", "input: DiffLoss condition rows (uncond half for CFG)")
    desc("diff_xT.npy", "input: x_T start noise per row")
    desc("diff_eps.npy", "input: eps[j] = noise of respaced step j (slot 0 unused)")
    desc("diff_netout_t999.npy", "target SimpleMLPAdaLN(diff_xT, t=999 (original timestep), diff_z): "
         "[:, :16] eps, [:, 16:] v")
    desc("diff_x0_cfg.npy", "sample_diffusion(target head, diff_z, diff_z_uncond, cfg, temperature)",
         cfg=DIFF["cfg"], temperature=DIFF["temperature_cfg"])
    desc("diff_mean_logvar_j0.npy", "cfg run above, last step j=0: [:, :16] mean mu_0 (== diff_x0_cfg), "
         "[:, 16:] LEARNED_RANGE log-variance (posterior-clipped, before temperature)",
         cfg=DIFF["cfg"], temperature=DIFF["temperature_cfg"])
    desc("diff_x0_nocfg.npy", "sample_diffusion(target head, diff_z, None): net on cond rows only",
         cfg=1.0, temperature=DIFF["temperature_nocfg"])
    desc("vae_tokens.npy", "input: MAR-scaled latents [B, L, T] (raster order)")
    desc("vae_image.npy", "vae_decode(vae_tokens) = decoder(post_quant_conv(unpatchify(tokens / 0.2325)))",
         scale=VAE["scale"])
    desc("vae_pixels.npy", "to_uint8(vae_image.npy as float32): np.round(np.clip((x+1)/2*255, 0, 255)) "
         "(round half to even), NHWC uint8")
    desc("gen_labels.npy", "input: class labels of the generation runs")
    desc("gen_orders.npy", "input: generation orders (random permutations); tokens are unmasked from the "
         "tail of the order towards its head")
    desc("gen_noise.npy", "input: x_T of position k")
    desc("gen_eps.npy", "input: step noise of position k at respaced step j ([B, L, S, T], slot 0 unused)")
    for name, (which, num_iter, cfg, sched, temp) in GEN_SETTINGS.items():
        desc(name, f"sample_tokens({which}, gen_labels, gen_orders, gen_noise, gen_eps) -> tokens [B, L, T]",
             model=which, num_iter=num_iter, cfg=cfg, cfg_schedule=sched, temperature=temp)
    desc("diffusion_tables.npy", "float64 [100, 6]: timestep_map, betas', alphas_cumprod', "
         "posterior_log_variance_clipped, posterior_mean_coef1, posterior_mean_coef2 (cosine, T=1000, "
         "respaced to 100)")
    for it in (64, 256, 32, 16):
        desc(f"mask_schedule_L256_iter{it}.npy", "tokens predicted per step, L=256", num_iter=it)
    with open(os.path.join(OUT, "golden", "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")

    # ---- stats
    for name in ("diff_x0_cfg.npy", "diff_x0_nocfg.npy", "gen_tokens_iter4_cfg2_linear.npy",
                 "gen_tokens_iter16_cfg1.npy", "gen_tokens_iter8_cfg3_constant.npy",
                 "gen_tokens_draft_iter4_cfg2_linear.npy", "mae_z.npy"):
        a = gold[name]
        print(f"  {name}: mean|.| {np.abs(a).mean():.3f} max|.| {np.abs(a).max():.3f}")
    v = gold["diff_netout_t999.npy"][:, 16:]
    print(f"  v at t=999: [{v.min():.2f}, {v.max():.2f}]")
    px = gold["vae_pixels.npy"]
    im = gold["vae_image.npy"]
    print(f"  vae image [{im.min():.3f}, {im.max():.3f}] pixels mean {px.mean():.1f} std {px.std():.1f} "
          f"saturated {np.mean((px == 0) | (px == 255)) * 100:.1f}%")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(OUT) for fn in fns)
    print(f"seed {args.seed}: wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
