"""PyTorch reference of MAR (Li et al. 2024, "Autoregressive Image Generation without Vector
Quantization", LTH14/mar): the MAE-style encoder/decoder, the DiffLoss MLP head with its
respaced cosine diffusion sampler, the MaskGIT-style generation loop and the KL-16 VAE decoder.
Written from a description of LTH14/mar (models/mar.py, models/diffloss.py, diffusion/,
models/vae.py).

Module and parameter names equal the official state-dict keys, so `MAR(...).load_state_dict(sd)`
takes an official `model_ema` state dict and `KLDecoder(...).load_state_dict(sd)` takes the
`post_quant_conv.*` / `decoder.*` part of kl16.ckpt (strict).

Inference only: dropout, label dropout and the training loss are not implemented.
All randomness is injected (generation orders, x_T per position, per-step noise per position),
the way the CSpD runner does it, so the C++ engine can be compared bit-for-bit-ish.

Precision conventions (mirroring the official code, so the same functions run in float32 like
the official sampler or in float64 for golden files):
- the diffusion tables are built in float64 (numpy) and ROUNDED TO FLOAT32 on every use
  (official `_extract_into_tensor(...).float()`), then promoted to the working dtype;
- the timestep sinusoid uses float32 frequencies and float32 arguments t*freq (official
  `TimestepEmbedder.timestep_embedding`), cos/sin are then evaluated in the working dtype;
- the linear CFG scale cfg_iter is rounded to float32 (official: a float32 torch tensor).
"""
import math
from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .convert_common import DecoderTensors
from .llamagen import AttnBlock, ResnetBlock, Upsample, swish


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------

@dataclass
class MarArgs:
    dim: int = 768                 # encoder_embed_dim == decoder_embed_dim
    encoder_depth: int = 12
    decoder_depth: int = 12
    n_head: int = 12
    mlp_ratio: float = 4.0
    num_classes: int = 1000        # rows of class_emb (the official code hard-codes 1000)
    buffer_size: int = 64
    img_size: int = 256
    vae_stride: int = 16
    patch_size: int = 1
    vae_embed_dim: int = 16
    diffloss_depth: int = 6
    diffloss_width: int = 1024
    norm_eps: float = 1e-6
    num_sampling_steps: int = 100
    num_train_timesteps: int = 1000

    @property
    def seq_h(self):
        return self.img_size // self.vae_stride // self.patch_size

    @property
    def seq_w(self):
        return self.seq_h

    @property
    def seq_len(self):
        return self.seq_h * self.seq_w

    @property
    def token_dim(self):
        return self.vae_embed_dim * self.patch_size ** 2


# name -> architecture (mar_base/large/huge in models/mar.py; DiffLoss depth x width are the README
# evaluation values)
MAR_CONFIGS = {
    "mar_base": dict(dim=768, encoder_depth=12, decoder_depth=12, n_head=12, diffloss_depth=6, diffloss_width=1024),
    "mar_large": dict(dim=1024, encoder_depth=16, decoder_depth=16, n_head=16, diffloss_depth=8, diffloss_width=1280),
    "mar_huge": dict(dim=1280, encoder_depth=20, decoder_depth=20, n_head=16, diffloss_depth=12, diffloss_width=1536),
}


def mar_args(name, **overrides):
    kw = dict(MAR_CONFIGS[name])
    kw.update(overrides)
    return MarArgs(**kw)


# ----------------------------------------------------------------------------------------------
# MAE encoder / decoder (timm 0.9 pre-norm ViT block)
# ----------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, dim, n_head):
        super().__init__()
        self.n_head = n_head
        self.head_dim = dim // n_head
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]                      # [B, H, N, hd]
        att = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        att = att.softmax(dim=-1)                             # full bidirectional attention
        y = (att @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))                  # exact (erf) GELU


class Block(nn.Module):
    """x += attn(norm1(x)); x += mlp(norm2(x)). No LayerScale, no qk-norm."""

    def __init__(self, dim, n_head, mlp_ratio, eps):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, n_head)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# ----------------------------------------------------------------------------------------------
# DiffLoss head: SimpleMLPAdaLN (models/diffloss.py)
# ----------------------------------------------------------------------------------------------

def modulate(x, shift, scale):
    return x * (1 + scale) + shift


def timestep_embedding(t, dim=256, max_period=10000, dtype=torch.float32):
    """[cos(t*f), sin(t*f)] with f_i = exp(-ln(max_period) * i / half), i < half.
    Frequencies and arguments are float32 as in the official code; cos/sin in `dtype`."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t.reshape(-1, 1).to(torch.float32) * freqs[None]
    args = args.to(dtype)
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq_dim=256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        dtype = self.mlp[0].weight.dtype
        return self.mlp(timestep_embedding(t, self.freq_dim, dtype=dtype))


class ResBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.in_ln = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def forward(self, x, y):
        shift, scale, gate = self.adaLN_modulation(y).chunk(3, dim=-1)
        return x + gate * self.mlp(modulate(self.in_ln(x), shift, scale))


class FinalLayer(nn.Module):
    def __init__(self, width, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(width, out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))

    def forward(self, x, y):
        shift, scale = self.adaLN_modulation(y).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class SimpleMLPAdaLN(nn.Module):
    """out[:, :C] = predicted eps, out[:, C:] = variance interpolation value v (LEARNED_RANGE)."""

    def __init__(self, in_channels, width, out_channels, z_channels, depth):
        super().__init__()
        self.in_channels = in_channels
        self.time_embed = TimestepEmbedder(width)
        self.cond_embed = nn.Linear(z_channels, width)
        self.input_proj = nn.Linear(in_channels, width)
        self.res_blocks = nn.ModuleList([ResBlock(width) for _ in range(depth)])
        self.final_layer = FinalLayer(width, out_channels)

    def forward(self, x, t, c):
        """x [N, C] noisy token, t [N] ORIGINAL timestep index (0..999), c [N, D] condition."""
        h = self.input_proj(x)
        y = self.time_embed(t) + self.cond_embed(c)
        for blk in self.res_blocks:
            h = blk(h, y)
        return self.final_layer(h, y)


class DiffLoss(nn.Module):
    def __init__(self, token_dim, z_channels, depth, width):
        super().__init__()
        self.net = SimpleMLPAdaLN(token_dim, width, 2 * token_dim, z_channels, depth)


# ----------------------------------------------------------------------------------------------
# MAR
# ----------------------------------------------------------------------------------------------

class MAR(nn.Module):
    def __init__(self, args: MarArgs):
        super().__init__()
        self.args = args
        D, T, L, Bf = args.dim, args.token_dim, args.seq_len, args.buffer_size
        self.seq_len, self.buffer_size, self.token_dim = L, Bf, T
        self.class_emb = nn.Embedding(args.num_classes, D)
        self.fake_latent = nn.Parameter(torch.zeros(1, D))
        # encoder
        self.z_proj = nn.Linear(T, D)
        self.z_proj_ln = nn.LayerNorm(D, eps=1e-6)
        self.encoder_pos_embed_learned = nn.Parameter(torch.zeros(1, L + Bf, D))
        self.encoder_blocks = nn.ModuleList([Block(D, args.n_head, args.mlp_ratio, args.norm_eps)
                                             for _ in range(args.encoder_depth)])
        self.encoder_norm = nn.LayerNorm(D, eps=args.norm_eps)
        # decoder
        self.decoder_embed = nn.Linear(D, D)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, D))
        self.decoder_pos_embed_learned = nn.Parameter(torch.zeros(1, L + Bf, D))
        self.decoder_blocks = nn.ModuleList([Block(D, args.n_head, args.mlp_ratio, args.norm_eps)
                                             for _ in range(args.decoder_depth)])
        self.decoder_norm = nn.LayerNorm(D, eps=args.norm_eps)
        self.diffusion_pos_embed_learned = nn.Parameter(torch.zeros(1, L, D))
        # head
        self.diffloss = DiffLoss(T, D, args.diffloss_depth, args.diffloss_width)

    def class_embedding(self, labels):
        """labels [B] int; a negative label selects the unconditional `fake_latent`."""
        labels = torch.as_tensor(labels).long().reshape(-1)
        emb = self.class_emb(labels.clamp(min=0))
        uncond = (labels < 0).unsqueeze(-1)
        return torch.where(uncond, self.fake_latent.expand_as(emb), emb)

    def forward_mae_encoder(self, tokens, mask, class_embedding):
        x = self.z_proj(tokens)
        B, L, D = x.shape
        # prepend the buffer, every buffer row = the class embedding
        x = torch.cat([class_embedding.unsqueeze(1).expand(B, self.buffer_size, D), x], dim=1)
        keep = torch.cat([torch.ones(B, self.buffer_size, dtype=torch.bool, device=x.device),
                          mask < 0.5], dim=1)
        x = self.z_proj_ln(x + self.encoder_pos_embed_learned)
        # drop the masked rows (needs the same number of known tokens in every row)
        x = x[keep].reshape(B, -1, D)
        for blk in self.encoder_blocks:
            x = blk(x)
        return self.encoder_norm(x)

    def forward_mae_decoder(self, x, mask):
        x = self.decoder_embed(x)
        B, _, D = x.shape
        keep = torch.cat([torch.ones(B, self.buffer_size, dtype=torch.bool, device=x.device),
                          mask < 0.5], dim=1)
        full = self.mask_token.expand(B, keep.shape[1], D).clone()
        full[keep] = x.reshape(-1, D)                          # ascending position order
        x = full + self.decoder_pos_embed_learned
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_norm(x)
        return x[:, self.buffer_size:] + self.diffusion_pos_embed_learned

    def forward_mae(self, tokens, mask, class_embedding):
        """tokens [B, L, T] (unknown rows are ignored), mask [B, L] (1 = unknown),
        class_embedding [B, D] -> z [B, L, D], the per-position DiffLoss condition."""
        known = (mask < 0.5).sum(dim=1)
        if not bool((known == known[0]).all()):
            raise ValueError("every batch row needs the same number of known tokens")
        return self.forward_mae_decoder(self.forward_mae_encoder(tokens, mask, class_embedding), mask)


# ----------------------------------------------------------------------------------------------
# Gaussian diffusion: cosine schedule, respacing, LEARNED_RANGE sampler
# (diffusion/gaussian_diffusion.py, diffusion/respace.py)
# ----------------------------------------------------------------------------------------------

def cosine_betas(num_timesteps=1000, max_beta=0.999):
    abar = lambda s: math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    return np.array([min(1 - abar((i + 1) / num_timesteps) / abar(i / num_timesteps), max_beta)
                     for i in range(num_timesteps)], dtype=np.float64)


def space_timesteps(num_timesteps, count):
    """IDDPM/DiT `space_timesteps(T, str(count))` with a single section: round(k * (T-1)/(count-1))
    accumulated by repeated addition (Python round = half-even; no ties occur for 1000/100)."""
    if count == 1:
        return [0]
    stride = (num_timesteps - 1) / (count - 1)
    cur, taken = 0.0, []
    for _ in range(count):
        taken.append(round(cur))
        cur += stride
    return sorted(set(taken))


class DiffusionTables:
    """float64 tables of the respaced process, indexed by the respaced step j (0 = last)."""

    def __init__(self, num_sampling_steps=100, num_train_timesteps=1000):
        base = cosine_betas(num_train_timesteps)
        abar = np.cumprod(1.0 - base)
        self.timestep_map = np.array(space_timesteps(num_train_timesteps, num_sampling_steps), dtype=np.int64)
        last, betas = 1.0, []
        for i in self.timestep_map:
            betas.append(1.0 - abar[i] / last)
            last = abar[i]
        self.betas = np.array(betas, dtype=np.float64)
        self.num_steps = len(self.betas)
        a = 1.0 - self.betas
        self.alphas_cumprod = np.cumprod(a)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        self.posterior_variance = self.betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_log_variance_clipped = np.log(np.append(self.posterior_variance[1], self.posterior_variance[1:]))
        self.posterior_mean_coef1 = self.betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_mean_coef2 = (1.0 - self.alphas_cumprod_prev) * np.sqrt(a) / (1.0 - self.alphas_cumprod)
        self.log_betas = np.log(self.betas)

    def at(self, name, j, dtype):
        """Table value at step j, rounded to float32 (official) then promoted to dtype."""
        return torch.tensor(float(np.float32(getattr(self, name)[j])), dtype=torch.float32).to(dtype)

    def as_matrix(self):
        """[S, 6] float64: timestep_map, betas', alphas_cumprod', posterior_log_variance_clipped,
        posterior_mean_coef1, posterior_mean_coef2."""
        return np.stack([self.timestep_map.astype(np.float64), self.betas, self.alphas_cumprod,
                         self.posterior_log_variance_clipped, self.posterior_mean_coef1,
                         self.posterior_mean_coef2], axis=1)


_TABLES = {}


def diffusion_tables(num_sampling_steps=100, num_train_timesteps=1000):
    key = (num_sampling_steps, num_train_timesteps)
    if key not in _TABLES:
        _TABLES[key] = DiffusionTables(num_sampling_steps, num_train_timesteps)
    return _TABLES[key]


def net_output(net, x, t, z):
    """Raw SimpleMLPAdaLN output [N, 2C] for x [N, C], ORIGINAL timestep t (int or [N]), z [N, D]."""
    t = torch.as_tensor(t).long().reshape(-1)
    if t.numel() == 1:
        t = t.expand(x.shape[0])
    return net(x, t, z)


def guided_output(net, x, t, z_cond, z_uncond=None, cfg=1.0):
    """Official forward / forward_with_cfg for the cond half: without CFG the net runs on
    (x, z_cond); with CFG on [x; x] with [z_cond; z_uncond], eps = eps_u + cfg*(eps_c - eps_u)
    and the variance channels come from the cond half. Returns [N, 2C]."""
    C = x.shape[1]
    if z_uncond is None:
        return net_output(net, x, t, z_cond)
    out = net_output(net, torch.cat([x, x], 0), t, torch.cat([z_cond, z_uncond], 0))
    N = x.shape[0]
    eps_c, eps_u = out[:N, :C], out[N:, :C]
    s = torch.tensor(float(np.float32(cfg)), dtype=x.dtype)
    return torch.cat([eps_u + s * (eps_c - eps_u), out[:N, C:]], dim=1)


def p_mean_variance(net, x, j, z_cond, z_uncond=None, cfg=1.0, tables=None):
    """One respaced step j: returns (mean, log_variance, model_output) of p(x_{j-1} | x_j).
    LEARNED_RANGE: logvar = frac*log(beta'_j) + (1-frac)*posterior_log_variance_clipped_j with
    frac = (v+1)/2 (v unclamped); x0 = sqrt(1/abar)x - sqrt(1/abar-1)eps, no clipping."""
    tb = tables or diffusion_tables()
    C = x.shape[1]
    out = guided_output(net, x, int(tb.timestep_map[j]), z_cond, z_uncond, cfg)
    eps, v = out[:, :C], out[:, C:]
    dt = x.dtype
    min_log = tb.at("posterior_log_variance_clipped", j, dt)
    max_log = tb.at("log_betas", j, dt)
    frac = (v + 1) / 2
    log_variance = frac * max_log + (1 - frac) * min_log
    x0 = tb.at("sqrt_recip_alphas_cumprod", j, dt) * x - tb.at("sqrt_recipm1_alphas_cumprod", j, dt) * eps
    mean = tb.at("posterior_mean_coef1", j, dt) * x0 + tb.at("posterior_mean_coef2", j, dt) * x
    return mean, log_variance, out


@torch.no_grad()
def sample_diffusion(net, z_cond, z_uncond, cfg, temperature, x_T, eps, tables=None, trace=None):
    """DiffLoss.sample with injected noise. x_T [N, C] start noise (not scaled by temperature),
    eps [S, N, C]: eps[j] is the noise of respaced step j (slot 0 unused, no noise at j=0).
    z_uncond None -> no CFG (cfg ignored). Returns x0 [N, C] = the last-step mean mu_0.
    trace: optional list receiving one dict per step j (j, mean, log_variance, out)."""
    tb = tables or diffusion_tables()
    x = x_T
    for j in reversed(range(tb.num_steps)):
        mean, logvar, out = p_mean_variance(net, x, j, z_cond, z_uncond, cfg, tb)
        if trace is not None:
            trace.append(dict(j=j, mean=mean, log_variance=logvar, out=out))
        if j > 0:
            x = mean + torch.exp(0.5 * logvar) * eps[j].to(x.dtype) * temperature
        else:
            x = mean
    return x


# ----------------------------------------------------------------------------------------------
# generation loop (MAR.sample_tokens in models/mar.py)
# ----------------------------------------------------------------------------------------------

def mask_len_after(step, num_iter, seq_len, masked_now):
    """Clamped number of tokens that stay masked after `step` (MaskGIT cosine, float64 numpy:
    floor(L*cos(pi/2*(step+1)/num_iter)) clamped to [1, masked_now-1])."""
    ratio = np.cos(math.pi / 2.0 * (step + 1) / num_iter)
    m = int(np.floor(seq_len * ratio))
    return max(1, min(masked_now - 1, m))


def mask_schedule(seq_len, num_iter):
    """Tokens predicted at each step (the last step predicts every remaining token)."""
    counts, masked = [], seq_len
    for step in range(num_iter):
        m = mask_len_after(step, num_iter, seq_len, masked)
        n = masked if step >= num_iter - 1 else masked - m
        counts.append(n)
        masked -= n
    return counts


def cfg_scale(cfg, cfg_schedule, seq_len, mask_len):
    """Linear (Muse): 1 + (cfg-1)*(L - mask_len)/L with the POST-step clamped mask_len."""
    if cfg_schedule == "linear":
        return float(np.float32(1 + (cfg - 1) * (seq_len - mask_len) / seq_len))
    if cfg_schedule == "constant":
        return float(cfg)
    raise ValueError(f"unknown cfg_schedule {cfg_schedule}")


@torch.no_grad()
def sample_tokens(model, labels, num_iter, cfg, cfg_schedule, temperature, orders, noise, eps, trace=None):
    """MAR.sample_tokens with injected randomness.
    labels [B] (negative = unconditional fake_latent), orders [B, L] int permutations,
    noise [B, L, T] (x_T of position k), eps [B, L, S, T] (step noise of position k).
    Position k always uses noise[:, k] and eps[:, k] whatever step predicts it.
    Returns tokens [B, L, T] (raster order, not unpatchified).
    trace: optional list receiving per step dict(step, mask, to_pred, cfg_iter)."""
    dt = model.z_proj.weight.dtype
    B = orders.shape[0]
    L, T = model.seq_len, model.token_dim
    orders = torch.as_tensor(orders).long()
    noise = torch.as_tensor(noise).to(dt)
    eps = torch.as_tensor(eps).to(dt)
    tables = diffusion_tables(model.args.num_sampling_steps, model.args.num_train_timesteps)
    use_cfg = not cfg == 1.0
    mask = torch.ones(B, L, dtype=dt)
    tokens = torch.zeros(B, L, T, dtype=dt)
    cond = model.class_embedding(labels).to(dt)
    for step in range(num_iter):
        if use_cfg:
            z = model.forward_mae(torch.cat([tokens, tokens]), torch.cat([mask, mask]),
                                  torch.cat([cond, model.fake_latent.expand(B, -1)]))
        else:
            z = model.forward_mae(tokens, mask, cond)
        masked_now = int(mask[0].sum().item())
        mask_len = mask_len_after(step, num_iter, L, masked_now)
        mask_next = torch.zeros(B, L, dtype=dt)
        mask_next.scatter_(1, orders[:, :mask_len], 1.0)
        if step >= num_iter - 1:
            to_pred = mask.bool()
        else:
            to_pred = mask.bool() ^ mask_next.bool()
        cfg_iter = cfg_scale(cfg, cfg_schedule, L, mask_len)
        idx = to_pred.nonzero(as_tuple=True)                   # row-major (b, position)
        z_c = z[:B][idx]
        z_u = z[B:][idx] if use_cfg else None
        x_T = noise[idx]                                       # [N, T]
        e = eps[idx].permute(1, 0, 2)                          # [S, N, T]
        sampled = sample_diffusion(model.diffloss.net, z_c, z_u, cfg_iter, temperature, x_T, e, tables)
        if trace is not None:
            trace.append(dict(step=step, mask=mask.clone(), to_pred=to_pred.clone(), cfg_iter=cfg_iter,
                              mask_len=mask_len))
        tokens = tokens.clone()
        tokens[idx] = sampled
        mask = mask_next
    return tokens


# ----------------------------------------------------------------------------------------------
# KL-16 VAE decoder (LDM AutoencoderKL, models/vae.py)
# ----------------------------------------------------------------------------------------------

@dataclass
class VAEArgs:
    embed_dim: int = 16
    z_channels: int = 16           # MAR builds Decoder(z_channels=embed_dim)
    ch: int = 128
    ch_mult: List[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    num_res_blocks: int = 2
    # LDM curr_res convention: up level i (0 = highest resolution) has an AttnBlock after each
    # ResnetBlock iff resolution // 2**i is listed, where resolution is the full image size
    # (MAR's Decoder uses resolution=256 == image size). Empty for kl16.
    attn_resolutions: List[int] = field(default_factory=list)
    resolution: int = 256
    norm_groups: int = 32
    norm_eps: float = 1e-6
    out_ch: int = 3
    scale: float = 0.2325


# The decoder blocks are VQGAN's (tessera_ref.llamagen): same names, same arithmetic.


class _Mid(nn.Module):
    pass


class _Up(nn.Module):
    pass


class Decoder(nn.Module):
    def __init__(self, a: VAEArgs):
        super().__init__()
        n = len(a.ch_mult)
        self.num_resolutions, self.num_res_blocks = n, a.num_res_blocks
        g, e = a.norm_groups, a.norm_eps
        block_in = a.ch * a.ch_mult[-1]
        curr_res = a.resolution // 2 ** (n - 1)
        self.conv_in = nn.Conv2d(a.z_channels, block_in, 3, 1, 1)
        self.mid = _Mid()
        self.mid.block_1 = ResnetBlock(block_in, block_in, g, e)
        self.mid.attn_1 = AttnBlock(block_in, g, e)
        self.mid.block_2 = ResnetBlock(block_in, block_in, g, e)
        ups = []
        for i in reversed(range(n)):                           # lowest resolution first
            up = _Up()
            up.block, up.attn = nn.ModuleList(), nn.ModuleList()
            block_out = a.ch * a.ch_mult[i]
            for _ in range(a.num_res_blocks + 1):
                up.block.append(ResnetBlock(block_in, block_out, g, e))
                block_in = block_out
                if curr_res in a.attn_resolutions:
                    up.attn.append(AttnBlock(block_in, g, e))
            if i != 0:
                up.upsample = Upsample(block_in)
                curr_res *= 2
            ups.insert(0, up)                                  # up[0] = highest resolution
        self.up = nn.ModuleList(ups)
        self.norm_out = nn.GroupNorm(g, block_in, eps=e)
        self.conv_out = nn.Conv2d(block_in, a.out_ch, 3, 1, 1)

    def forward(self, z):
        h = self.conv_in(z)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        for i in reversed(range(self.num_resolutions)):
            up = self.up[i]
            for j in range(self.num_res_blocks + 1):
                h = up.block[j](h)
                if len(up.attn) > 0:
                    h = up.attn[j](h)
            if i != 0:
                h = up.upsample(h)
        return self.conv_out(swish(self.norm_out(h)))


class KLDecoder(nn.Module):
    """The decode path of AutoencoderKL: post_quant_conv (embed_dim -> z_channels) + decoder."""

    def __init__(self, a: VAEArgs):
        super().__init__()
        self.args = a
        self.post_quant_conv = nn.Conv2d(a.embed_dim, a.z_channels, 1)
        self.decoder = Decoder(a)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


def unpatchify(tokens, patch_size, seq_h, seq_w):
    """[B, h*w, c*p*p] (n (h w) (c p q)) -> [B, c, h*p, w*p]."""
    B, L, D = tokens.shape
    p = patch_size
    c = D // (p * p)
    x = tokens.reshape(B, seq_h, seq_w, c, p, p)
    x = torch.einsum("nhwcpq->nchpwq", x)
    return x.reshape(B, c, seq_h * p, seq_w * p)


@torch.no_grad()
def vae_decode(vae, tokens, scale=0.2325, patch_size=1, seq_h=None, seq_w=None):
    """tokens [B, L, T] as MAR produces them -> float image [B, 3, H, W] (nominally [-1, 1])."""
    L = tokens.shape[1]
    if seq_h is None:
        seq_h = seq_w = int(round(math.sqrt(L)))
    x = unpatchify(tokens / scale, patch_size, seq_h, seq_w)
    return vae.decode(x.to(vae.post_quant_conv.weight.dtype))


def to_uint8(x):
    """MAR's image conversion (engine_mar.evaluate): y = (x+1)/2 (torch, input dtype), then
    np.round(np.clip(y*255, 0, 255)) -- numpy round-half-to-even -- then uint8; NHWC.
    x: [B, 3, H, W] tensor -> numpy uint8 [B, H, W, 3]."""
    y = ((x + 1) / 2).detach().cpu().numpy()
    y = np.round(np.clip(y * 255, 0, 255)).astype(np.uint8)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


# ----------------------------------------------------------------------------------------------
# expected tensor names / shapes (shared by the converter and the tests)
# ----------------------------------------------------------------------------------------------

def mar_expected(a: MarArgs):
    """Ordered official name -> shape of every MAR state-dict tensor."""
    D, T, L, Bf, W = a.dim, a.token_dim, a.seq_len, a.buffer_size, a.diffloss_width
    H = int(D * a.mlp_ratio)
    e = {"class_emb.weight": [a.num_classes, D], "fake_latent": [1, D],
         "z_proj.weight": [D, T], "z_proj.bias": [D], "z_proj_ln.weight": [D], "z_proj_ln.bias": [D],
         "encoder_pos_embed_learned": [1, L + Bf, D]}

    def block(p):
        e[p + "norm1.weight"] = [D]
        e[p + "norm1.bias"] = [D]
        e[p + "attn.qkv.weight"] = [3 * D, D]
        e[p + "attn.qkv.bias"] = [3 * D]
        e[p + "attn.proj.weight"] = [D, D]
        e[p + "attn.proj.bias"] = [D]
        e[p + "norm2.weight"] = [D]
        e[p + "norm2.bias"] = [D]
        e[p + "mlp.fc1.weight"] = [H, D]
        e[p + "mlp.fc1.bias"] = [H]
        e[p + "mlp.fc2.weight"] = [D, H]
        e[p + "mlp.fc2.bias"] = [D]

    for i in range(a.encoder_depth):
        block(f"encoder_blocks.{i}.")
    e["encoder_norm.weight"] = [D]
    e["encoder_norm.bias"] = [D]
    e["decoder_embed.weight"] = [D, D]
    e["decoder_embed.bias"] = [D]
    e["mask_token"] = [1, 1, D]
    e["decoder_pos_embed_learned"] = [1, L + Bf, D]
    for i in range(a.decoder_depth):
        block(f"decoder_blocks.{i}.")
    e["decoder_norm.weight"] = [D]
    e["decoder_norm.bias"] = [D]
    e["diffusion_pos_embed_learned"] = [1, L, D]
    n = "diffloss.net."
    e[n + "time_embed.mlp.0.weight"] = [W, 256]
    e[n + "time_embed.mlp.0.bias"] = [W]
    e[n + "time_embed.mlp.2.weight"] = [W, W]
    e[n + "time_embed.mlp.2.bias"] = [W]
    e[n + "cond_embed.weight"] = [W, D]
    e[n + "cond_embed.bias"] = [W]
    e[n + "input_proj.weight"] = [W, T]
    e[n + "input_proj.bias"] = [W]
    for j in range(a.diffloss_depth):
        p = f"{n}res_blocks.{j}."
        e[p + "in_ln.weight"] = [W]
        e[p + "in_ln.bias"] = [W]
        e[p + "mlp.0.weight"] = [W, W]
        e[p + "mlp.0.bias"] = [W]
        e[p + "mlp.2.weight"] = [W, W]
        e[p + "mlp.2.bias"] = [W]
        e[p + "adaLN_modulation.1.weight"] = [3 * W, W]
        e[p + "adaLN_modulation.1.bias"] = [3 * W]
    e[n + "final_layer.linear.weight"] = [2 * T, W]
    e[n + "final_layer.linear.bias"] = [2 * T]
    e[n + "final_layer.adaLN_modulation.1.weight"] = [2 * W, W]
    e[n + "final_layer.adaLN_modulation.1.bias"] = [2 * W]
    return e


def vae_expected(a: VAEArgs):
    """Ordered official name -> shape of the decode-path tensors of kl16.ckpt."""
    E = {}
    T = DecoderTensors(E)
    conv, gn, res, attn = T.conv, T.gn, T.res, T.attn

    conv("post_quant_conv", a.embed_dim, a.z_channels, 1)
    n = len(a.ch_mult)
    bi = a.ch * a.ch_mult[-1]
    conv("decoder.conv_in", a.z_channels, bi, 3)
    res("decoder.mid.block_1", bi, bi)
    attn("decoder.mid.attn_1", bi)
    res("decoder.mid.block_2", bi, bi)
    # walk the levels in execution order, record under the level index i
    curr_res = a.resolution // 2 ** (n - 1)
    levels = {}
    for i in reversed(range(n)):
        lv = {}
        bo = a.ch * a.ch_mult[i]
        for j in range(a.num_res_blocks + 1):
            lv[f"block.{j}"] = (bi, bo)
            bi = bo
            if curr_res in a.attn_resolutions:
                lv[f"attn.{j}"] = bi
        if i != 0:
            lv["upsample"] = bi
            curr_res *= 2
        levels[i] = lv
    for i in range(n):                                         # state-dict order: up.0, up.1, ...
        lv = levels[i]
        for j in range(a.num_res_blocks + 1):
            res(f"decoder.up.{i}.block.{j}", *lv[f"block.{j}"])
        for j in range(a.num_res_blocks + 1):
            if f"attn.{j}" in lv:
                attn(f"decoder.up.{i}.attn.{j}", lv[f"attn.{j}"])
        if "upsample" in lv:
            conv(f"decoder.up.{i}.upsample.conv", lv["upsample"], lv["upsample"], 3)
    gn("decoder.norm_out", bi)
    conv("decoder.conv_out", bi, 3, 3)
    return E
