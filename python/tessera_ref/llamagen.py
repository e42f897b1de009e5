"""PyTorch reference of LlamaGen (GPT + VQ decoder), written from a description of
FoundationVision/LlamaGen (autoregressive/models/gpt.py, generate.py,
tokenizer/tokenizer_image/vq_model.py).

Module and parameter names equal the official state-dict keys, so an official state dict loads
with load_state_dict(strict=True) once `freqs_cis` / kv-cache keys are dropped.
Inference only (dropouts / drop-path / label dropout are not implemented: they are off in eval).
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------------

def find_multiple(n, k):
    return n if n % k == 0 else n + k - (n % k)


def default_ffn_dim(dim, multiple_of=256, ffn_dim_multiplier=None):
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return find_multiple(hidden, multiple_of)


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: Optional[int] = None
    multiple_of: int = 256
    ffn_dim_multiplier: Optional[float] = None
    ffn_dim: Optional[int] = None          # tessera extension: explicit SwiGLU hidden size
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    initializer_range: float = 0.02
    token_dropout_p: float = 0.1
    attn_dropout_p: float = 0.0
    resid_dropout_p: float = 0.1
    ffn_dropout_p: float = 0.1
    drop_path_rate: float = 0.0
    num_classes: int = 1000
    caption_dim: int = 2048
    class_dropout_prob: float = 0.1
    model_type: str = 'c2i'
    vocab_size: int = 16384
    cls_token_num: int = 1
    block_size: int = 256
    max_batch_size: int = 32
    max_seq_len: int = 2048

    def hidden_dim(self):
        if self.ffn_dim is not None:
            return self.ffn_dim
        return default_ffn_dim(self.dim, self.multiple_of, self.ffn_dim_multiplier)


# name -> (n_layer, n_head, dim)   (GPT_models in LlamaGen's autoregressive/models/gpt.py)
GPT_CONFIGS = {
    "GPT-B": (12, 12, 768),
    "GPT-L": (24, 16, 1024),
    "GPT-XL": (36, 20, 1280),
    "GPT-XXL": (48, 24, 1536),
    "GPT-XXXL": (48, 40, 2560),
    "GPT-1B": (22, 32, 2048),
    "GPT-3B": (24, 32, 3200),
    "GPT-7B": (32, 32, 4096),
}


class LabelEmbedder(nn.Module):
    """Class table with one extra 'null' row (index num_classes) when class_dropout_prob > 0."""

    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        use_cfg_embedding = int(dropout_prob > 0)
        self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
        self.num_classes = num_classes

    def forward(self, labels):
        return self.embedding_table(labels).unsqueeze(1)  # [B, 1, D]


class CaptionMLP(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=False)
        self.act = nn.GELU(approximate='tanh')
        self.fc2 = nn.Linear(hidden_features, out_features, bias=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CaptionEmbedder(nn.Module):
    def __init__(self, in_channels, hidden_size, token_num):
        super().__init__()
        self.cap_proj = CaptionMLP(in_channels, hidden_size, hidden_size)
        self.register_buffer("uncond_embedding", torch.randn(token_num, in_channels) / in_channels ** 0.5)

    def forward(self, caption):
        return self.cap_proj(caption)  # [B, T, D]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight  # normalise in fp32, round, then scale


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class KVCache:
    """Static cache [B, H, S, hd]; not a registered module (keeps state_dict clean)."""

    def __init__(self, max_batch_size, max_seq_length, n_head, head_dim, dtype, device=None):
        shape = (max_batch_size, n_head, max_seq_length, head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)

    def update(self, input_pos, k, v):
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


def apply_rotary_emb(x, freqs_cis):
    # x: [B, S, H, hd]; freqs_cis: [S, hd/2, 2] fp32. Interleaved pairs (2p, 2p+1).
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    x0, x1 = xs[..., 0], xs[..., 1]
    c, s = fc[..., 0], fc[..., 1]
    out = torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).flatten(3)
    return out.type_as(x)


def sdpa_math(q, k, v, mask):
    """Math scaled-dot-product attention with a boolean mask (True = attend), scale 1/sqrt(hd).
    (torch 1.13 has no F.scaled_dot_product_attention.) mask "causal": a square causal block
    (training's teacher forcing), through PyTorch's fused attention where it has one."""
    if isinstance(mask, str):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = torch.tril(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device))
    scale = 1.0 / (q.size(-1) ** 0.5)
    att = (q * scale) @ k.transpose(-2, -1)
    att = att.masked_fill(~mask, float('-inf'))
    att = torch.softmax(att, dim=-1)
    return att @ v


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.dim = args.dim
        self.n_head = args.n_head
        self.head_dim = args.dim // args.n_head
        self.n_kv_head = args.n_kv_head if args.n_kv_head is not None else args.n_head
        total = (self.n_head + 2 * self.n_kv_head) * self.head_dim
        self.wqkv = nn.Linear(args.dim, total, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        self.kv_cache = None

    def forward(self, x, freqs_cis, input_pos, mask):
        B, S, _ = x.shape
        kv = self.n_kv_head * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv, kv], dim=-1)
        q = q.view(B, S, self.n_head, self.head_dim)
        k = k.view(B, S, self.n_kv_head, self.head_dim)
        v = v.view(B, S, self.n_kv_head, self.head_dim)
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.kv_cache is not None:
            keys, values = self.kv_cache.update(input_pos, k, v)
        else:
            keys, values = k, v
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            keys = keys.repeat_interleave(rep, dim=1)
            values = values.repeat_interleave(rep, dim=1)
        out = sdpa_math(q, keys, values, mask)
        out = out.transpose(1, 2).contiguous().view(B, S, self.dim)
        return self.wo(out)


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim())
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cis, input_pos, mask):
        h = x + self.attention(self.attention_norm(x), freqs_cis, input_pos, mask)
        return h + self.feed_forward(self.ffn_norm(h))


def precompute_freqs_cis_2d(grid_size, n_elem, base=10000.0, cls_token_num=120):
    """[T + grid*grid, n_elem//2, 2] (cos, sin) fp32; the first T rows are all zero."""
    half = n_elem // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    t = torch.arange(grid_size, dtype=torch.float32)
    freqs = torch.outer(t, freqs)  # [grid, hd/4]
    grid = torch.cat([freqs[:, None, :].expand(-1, grid_size, -1),      # row angles
                      freqs[None, :, :].expand(grid_size, -1, -1)], -1)  # column angles
    cache = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(cls_token_num, half, 2), cache])


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.config = args
        self.vocab_size = args.vocab_size
        self.n_layer = args.n_layer
        self.block_size = args.block_size
        self.num_classes = args.num_classes
        self.model_type = args.model_type
        self.cls_token_num = args.cls_token_num
        if args.model_type == 'c2i':
            self.cls_embedding = LabelEmbedder(args.num_classes, args.dim, args.class_dropout_prob)
        elif args.model_type == 't2i':
            self.cls_embedding = CaptionEmbedder(args.caption_dim, args.dim, args.cls_token_num)
        else:
            raise ValueError(f"unknown model_type {args.model_type}")
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layer))
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.grid_size = int(round(args.block_size ** 0.5))
        assert self.grid_size * self.grid_size == args.block_size
        self.freqs_cis = precompute_freqs_cis_2d(self.grid_size, args.dim // args.n_head,
                                                 args.rope_base, args.cls_token_num)
        self.max_batch_size = -1
        self.max_seq_length = -1
        self.causal_mask = None

    def setup_caches(self, max_batch_size, max_seq_length, dtype):
        """Caches, mask and rotary table on the device of the weights (a GPU for distillation)."""
        head_dim = self.config.dim // self.config.n_head
        max_seq_length = find_multiple(max_seq_length, 8)
        self.max_seq_length = max_seq_length
        self.max_batch_size = max_batch_size
        dev = self.tok_embeddings.weight.device
        for b in self.layers:
            b.attention.kv_cache = KVCache(max_batch_size, max_seq_length, self.config.n_head, head_dim, dtype, dev)
        causal = torch.tril(torch.ones(max_seq_length, max_seq_length, dtype=torch.bool, device=dev))
        self.causal_mask = causal.unsqueeze(0).repeat(max_batch_size, 1, 1)
        self.freqs_cis = precompute_freqs_cis_2d(self.grid_size, head_dim, self.config.rope_base,
                                                 self.cls_token_num).to(dev)

    def apply_prefix_mask(self, emb_masks):
        """emb_masks: bool/0-1 [rows, T]; one row per cache batch row. Prefix columns of the
        causal mask are ANDed with the row's mask, then the diagonal is forced true."""
        T = emb_masks.shape[-1]
        m = self.causal_mask
        m[:, :, :T] = m[:, :, :T] & emb_masks.bool().unsqueeze(1)
        eye = torch.eye(m.size(1), m.size(2), dtype=torch.bool)
        m |= eye.unsqueeze(0)

    def forward(self, idx, cond_idx, input_pos):
        """Inference forward. Prefill: idx None, cond_idx = labels [B] or captions [B,T,C].
        Decode: cond_idx None, idx = tokens [B, k] at positions input_pos (k of them)."""
        if cond_idx is not None:
            h = self.cls_embedding(cond_idx)[:, :self.cls_token_num]
        else:
            h = self.tok_embeddings(idx)
        bs = h.shape[0]
        mask = self.causal_mask[:bs, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        for layer in self.layers:
            h = layer(h, freqs_cis, input_pos, mask)
        h = self.norm(h)
        return self.output(h).float()


# ----------------------------------------------------------------------------------------------
# Sampling / generation (mirrors generate.py)
# ----------------------------------------------------------------------------------------------

def top_k_top_p_filtering(logits, top_k=0, top_p=1.0, filter_value=-float('inf'), min_tokens_to_keep=1):
    if top_k > 0:
        k = min(max(top_k, min_tokens_to_keep), logits.size(-1))
        kth = torch.topk(logits, k)[0][..., -1, None]
        logits[logits < kth] = filter_value  # ties at the threshold survive
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=True)
        cum = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cum > top_p
        if min_tokens_to_keep > 1:
            remove[..., :min_tokens_to_keep] = False
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        to_remove = remove.scatter(1, sorted_idx, remove)
        logits[to_remove] = filter_value
    return logits


def sample(logits, temperature=1.0, top_k=0, top_p=1.0, sample_logits=True):
    logits = logits[:, -1, :] / max(temperature, 1e-5)
    if top_k > 0 or top_p < 1.0:
        logits = top_k_top_p_filtering(logits, top_k=top_k, top_p=top_p)
    probs = F.softmax(logits, dim=-1)
    if sample_logits:
        idx = torch.multinomial(probs, num_samples=1)
    else:
        _, idx = torch.topk(probs, k=1, dim=-1)
    return idx, probs


def _cfg(logits, cfg_scale, use_cfg=True):
    cond, uncond = torch.split(logits, len(logits) // 2, dim=0)
    if use_cfg:
        return uncond + (cond - uncond) * cfg_scale
    return cond


def generate(model, cond, max_new_tokens, cfg_scale=1.0, cfg_interval=-1, temperature=1.0,
             top_k=0, top_p=1.0, sample_logits=True, emb_masks=None, trace=None):
    """Mirrors LlamaGen generate(). cond: labels [B] (c2i) or captions [B, T, C] (t2i).
    trace: optional list; the guided fp32 logits [B, V] of each step are appended to it.
    Returns [B, max_new_tokens] int32 tokens."""
    use_cfg = cfg_scale > 1.0
    if model.model_type == 'c2i':
        if use_cfg:
            cond_combined = torch.cat([cond, torch.full_like(cond, model.num_classes)])
        else:
            cond_combined = cond
        T = 1
    else:
        if use_cfg:
            unc = torch.zeros_like(cond) + model.cls_embedding.uncond_embedding.to(cond.dtype)
            cond_combined = torch.cat([cond, unc])
        else:
            cond_combined = cond
        T = cond.shape[1]
    B = cond.shape[0]
    model.setup_caches(max_batch_size=B * 2 if use_cfg else B, max_seq_length=T + max_new_tokens,
                       dtype=model.tok_embeddings.weight.dtype)
    if emb_masks is not None:
        assert emb_masks.shape[0] == B and emb_masks.shape[-1] == T
        model.apply_prefix_mask(torch.cat([emb_masks, emb_masks]) if use_cfg else emb_masks)
    skw = dict(temperature=temperature, top_k=top_k, top_p=top_p, sample_logits=sample_logits)

    # prefill
    input_pos = torch.arange(0, T)
    logits = model(None, cond_combined, input_pos)
    if use_cfg:
        logits = _cfg(logits, cfg_scale)
    if trace is not None:
        trace.append(logits[:, -1, :].clone())
    tok, _ = sample(logits, **skw)
    out = [tok]
    # decode
    input_pos = torch.tensor([T], dtype=torch.long)
    cfg_flag = True
    for i in range(max_new_tokens - 1):
        if cfg_interval > -1 and i > cfg_interval:
            cfg_flag = False
        x = tok.view(-1, 1)
        if use_cfg:
            logits = model(torch.cat([x, x]), None, input_pos)
            logits = _cfg(logits, cfg_scale, cfg_flag)
        else:
            logits = model(x, None, input_pos)
        if trace is not None:
            trace.append(logits[:, -1, :].clone())
        tok, _ = sample(logits, **skw)
        input_pos = input_pos + 1
        out.append(tok.clone())
    return torch.cat(out, dim=1).to(torch.int32)


def caption_mask(caption):
    """Valid rows = rows that are not all zero. caption [T, C] or [B, T, C] -> bool [B, T]."""
    if caption.dim() == 2:
        caption = caption.unsqueeze(0)
    return caption.abs().sum(-1) != 0


def _prefix_cond(model, cond):
    """Returns (cond batch of 1, emb_mask or None)."""
    if model.model_type == 'c2i':
        label = model.num_classes if cond is None else int(cond)
        return torch.tensor([label], dtype=torch.long), None
    dtype = model.tok_embeddings.weight.dtype
    if cond is None:
        return model.cls_embedding.uncond_embedding.to(dtype).unsqueeze(0), None  # all valid
    cap = torch.as_tensor(cond)
    if cap.dim() == 2:
        cap = cap.unsqueeze(0)
    return cap.to(dtype), caption_mask(cap)


@torch.no_grad()
def forward_logits(model, cond, tokens, incremental=False):
    """Teacher forcing, no guidance. cond: class id (c2i) / caption [T, C] (t2i) / None
    (unconditional prefix). tokens: sequence of image token ids (len <= grid^2 - 1).
    Returns fp32 [len(tokens) + 1, V]; row i = next-token logits after prefix + tokens[:i].
    incremental=True feeds the tokens one at a time (KV-cache decode path)."""
    tokens = torch.as_tensor(tokens, dtype=torch.long).view(1, -1)
    n = tokens.shape[1]
    c, m = _prefix_cond(model, cond)
    T = model.cls_token_num
    model.setup_caches(1, T + model.block_size, model.tok_embeddings.weight.dtype)
    if m is not None:
        model.apply_prefix_mask(m)
    rows = [model(None, c, torch.arange(0, T))[0, -1:]]
    if n > 0:
        if incremental:
            for i in range(n):
                rows.append(model(tokens[:, i:i + 1], None, torch.tensor([T + i]))[0])
        else:
            rows.append(model(tokens, None, torch.arange(T, T + n))[0])
    return torch.cat(rows, 0).float()


# ----------------------------------------------------------------------------------------------
# VQ model (decode path; encoder included for tokenizer work)
# ----------------------------------------------------------------------------------------------

def Normalize(c, groups=32, eps=1e-6):
    return nn.GroupNorm(num_groups=groups, num_channels=c, eps=eps, affine=True)


def swish(x):
    return x * torch.sigmoid(x)


class ResnetBlock(nn.Module):
    """VQGAN / LDM ResnetBlock (dropout 0); MAR's KL decoder reuses it with its GroupNorm."""

    def __init__(self, cin, cout, groups=32, eps=1e-6):
        super().__init__()
        self.norm1 = Normalize(cin, groups, eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1)
        self.norm2 = Normalize(cout, groups, eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1, 1, 0)
        else:
            self.nin_shortcut = None

    def forward(self, x):
        h = self.conv1(swish(self.norm1(x)))
        h = self.conv2(swish(self.norm2(h)))
        skip = x if self.nin_shortcut is None else self.nin_shortcut(x)
        return skip + h


class AttnBlock(nn.Module):
    """Single-head spatial self-attention, softmax(q^T k / sqrt(C)), residual."""

    def __init__(self, c, groups=32, eps=1e-6):
        super().__init__()
        self.norm = Normalize(c, groups, eps)
        self.q = nn.Conv2d(c, c, 1)
        self.k = nn.Conv2d(c, c, 1)
        self.v = nn.Conv2d(c, c, 1)
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        b, c, hh, ww = q.shape
        q = q.reshape(b, c, hh * ww).permute(0, 2, 1)     # [b, hw, c]
        k = k.reshape(b, c, hh * ww)                      # [b, c, hw]
        w = torch.bmm(q, k) * (c ** -0.5)                 # [b, hw(query), hw(key)]
        w = torch.softmax(w, dim=2)
        v = v.reshape(b, c, hh * ww)
        h = torch.bmm(v, w.permute(0, 2, 1)).reshape(b, c, hh, ww)
        return x + self.proj_out(h)


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 2, 0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1), mode="constant", value=0))


class _Level(nn.Module):
    pass


class Decoder(nn.Module):
    def __init__(self, z_channels=256, ch=128, ch_mult=(1, 1, 2, 2, 4), num_res_blocks=2, out_channels=3):
        super().__init__()
        n = len(ch_mult)
        self.num_resolutions = n
        self.num_res_blocks = num_res_blocks
        block_in = ch * ch_mult[n - 1]
        self.conv_in = nn.Conv2d(z_channels, block_in, 3, 1, 1)
        self.mid = nn.ModuleList([ResnetBlock(block_in, block_in), AttnBlock(block_in),
                                  ResnetBlock(block_in, block_in)])
        self.conv_blocks = nn.ModuleList()
        for b in range(n):
            lvl = _Level()
            lvl.res = nn.ModuleList()
            lvl.attn = nn.ModuleList()
            block_out = ch * ch_mult[n - 1 - b]
            for _ in range(num_res_blocks + 1):
                lvl.res.append(ResnetBlock(block_in, block_out))
                block_in = block_out
                if b == 0:
                    lvl.attn.append(AttnBlock(block_in))
            if b != n - 1:
                lvl.upsample = Upsample(block_in)
            self.conv_blocks.append(lvl)
        self.norm_out = Normalize(block_in)
        self.conv_out = nn.Conv2d(block_in, out_channels, 3, 1, 1)

    def forward(self, z):
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for b, lvl in enumerate(self.conv_blocks):
            for j in range(self.num_res_blocks + 1):
                h = lvl.res[j](h)
                if len(lvl.attn) > 0:
                    h = lvl.attn[j](h)
            if b != self.num_resolutions - 1:
                h = lvl.upsample(h)
        return self.conv_out(swish(self.norm_out(h)))


class Encoder(nn.Module):
    """Mirror of the decoder (Encoder of LlamaGen's vq_model.py; less verified than the decoder):
    conv_in 3->ch; level i: num_res_blocks ResnetBlocks ch*in_mult[i] -> ch*ch_mult[i]
    (in_mult = (1,)+ch_mult), AttnBlocks after each at the last (lowest-res) level, Downsample
    after every level but the last; mid Res/Attn/Res; GN, swish, conv_out -> z_channels."""

    def __init__(self, in_channels=3, ch=128, ch_mult=(1, 1, 2, 2, 4), num_res_blocks=2, z_channels=256):
        super().__init__()
        n = len(ch_mult)
        self.num_resolutions = n
        self.num_res_blocks = num_res_blocks
        self.conv_in = nn.Conv2d(in_channels, ch, 3, 1, 1)
        in_mult = (1,) + tuple(ch_mult)
        self.conv_blocks = nn.ModuleList()
        block_in = ch
        for i in range(n):
            lvl = _Level()
            lvl.res = nn.ModuleList()
            lvl.attn = nn.ModuleList()
            block_in = ch * in_mult[i]
            block_out = ch * ch_mult[i]
            for _ in range(num_res_blocks):
                lvl.res.append(ResnetBlock(block_in, block_out))
                block_in = block_out
                if i == n - 1:
                    lvl.attn.append(AttnBlock(block_in))
            if i != n - 1:
                lvl.downsample = Downsample(block_in)
            self.conv_blocks.append(lvl)
        self.mid = nn.ModuleList([ResnetBlock(block_in, block_in), AttnBlock(block_in),
                                  ResnetBlock(block_in, block_in)])
        self.norm_out = Normalize(block_in)
        self.conv_out = nn.Conv2d(block_in, z_channels, 3, 1, 1)

    def forward(self, x):
        h = self.conv_in(x)
        for i, lvl in enumerate(self.conv_blocks):
            for j in range(self.num_res_blocks):
                h = lvl.res[j](h)
                if len(lvl.attn) > 0:
                    h = lvl.attn[j](h)
            if i != self.num_resolutions - 1:
                h = lvl.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(swish(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, n_e, e_dim, l2_norm=True, show_usage=True):
        super().__init__()
        self.embedding = nn.Embedding(n_e, e_dim)
        self.l2_norm = l2_norm
        if show_usage:
            self.register_buffer("codebook_used", torch.zeros(65536))

    def codebook(self):
        w = self.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.l2_norm else w

    def lookup(self, indices):
        return self.codebook()[indices]

    def nearest(self, z):
        """z [B, C, H, W] -> indices [B, H*W] (raster) by min squared distance."""
        zf = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
        if self.l2_norm:
            zf = F.normalize(zf, p=2, dim=-1)
        e = self.codebook()
        d = zf.pow(2).sum(1, keepdim=True) + e.pow(2).sum(1) - 2 * zf @ e.t()
        return torch.argmin(d, dim=1).view(z.shape[0], -1)


@dataclass
class VQArgs:
    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    codebook_l2_norm: bool = True
    z_channels: int = 256
    ch: int = 128
    ch_mult: List[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    num_res_blocks: int = 2


VQ_CONFIGS = {"VQ-16": [1, 1, 2, 2, 4], "VQ-8": [1, 2, 2, 4]}


class VQDecoderModel(nn.Module):
    """Decode path: quantize.embedding, post_quant_conv, decoder."""

    def __init__(self, args: VQArgs):
        super().__init__()
        self.args = args
        self.quantize = VectorQuantizer(args.codebook_size, args.codebook_embed_dim, args.codebook_l2_norm,
                                        show_usage=False)
        self.post_quant_conv = nn.Conv2d(args.codebook_embed_dim, args.z_channels, 1)
        self.decoder = Decoder(args.z_channels, args.ch, args.ch_mult, args.num_res_blocks)

    def decode_code(self, indices):
        """indices [B, g*g] or [B, g, g] (raster) -> float [B, 3, H, W]."""
        B = indices.shape[0]
        idx = indices.reshape(B, -1).long()
        g = int(round(idx.shape[1] ** 0.5))
        assert g * g == idx.shape[1]
        z = self.quantize.lookup(idx).view(B, g, g, -1).permute(0, 3, 1, 2).contiguous()
        return self.decoder(self.post_quant_conv(z))


class VQModel(VQDecoderModel):
    """Full tokenizer (encoder + quant_conv + codebook_used buffer), official key layout."""

    def __init__(self, args: VQArgs):
        super().__init__(args)
        self.quantize = VectorQuantizer(args.codebook_size, args.codebook_embed_dim, args.codebook_l2_norm,
                                        show_usage=True)
        self.encoder = Encoder(3, args.ch, args.ch_mult, args.num_res_blocks, args.z_channels)
        self.quant_conv = nn.Conv2d(args.z_channels, args.codebook_embed_dim, 1)

    def encode_indices(self, x):
        """x [B, 3, H, W] in [-1, 1] -> indices [B, (H/ds)*(W/ds)]."""
        return self.quantize.nearest(self.quant_conv(self.encoder(x)))


def to_uint8(x):
    """[B, 3, H, W] float -> uint8 NHWC: trunc(clamp(127.5x + 128, 0, 255))."""
    y = torch.clamp(127.5 * x.float() + 128.0, 0, 255)
    return y.to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def random_gpt(name, image_size=256, downsample=16, model_type="c2i"):
    """A named LlamaGen size with random weights (normal(0, 0.02), norms 1): benchmark stand-in
    with the official shapes."""
    L, H, D = GPT_CONFIGS[name]
    args = ModelArgs(dim=D, n_layer=L, n_head=H, model_type=model_type,
                     cls_token_num=1 if model_type == "c2i" else 120,
                     block_size=(image_size // downsample) ** 2)
    m = Transformer(args)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    return m


def load_tessera_gpt(path):
    """The GPT of a tessera model directory (config.json + gpt.safetensors, official key names) as
    an f32 reference Transformer."""
    import json
    import os
    from .safetensors_io import read_safetensors
    cfg = json.load(open(os.path.join(path, "config.json")))["gpt"]
    args = ModelArgs(dim=cfg["dim"], n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_kv_head=cfg.get("n_kv_head"),
                     ffn_dim=cfg["ffn_dim"], rope_base=cfg.get("rope_base", 10000.0),
                     norm_eps=cfg.get("norm_eps", 1e-5), num_classes=cfg.get("num_classes", 1000),
                     caption_dim=cfg.get("caption_dim", 2048), model_type=cfg["model_type"],
                     vocab_size=cfg["vocab_size"], cls_token_num=cfg["cls_token_num"],
                     block_size=cfg["grid"] ** 2)
    m = Transformer(args)
    sd = read_safetensors(os.path.join(path, cfg.get("file", "gpt.safetensors")))
    m.load_state_dict({k: v.float() for k, v in sd.items()})
    return m
