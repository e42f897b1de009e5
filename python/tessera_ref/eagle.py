"""PyTorch reference of the EAGLE drafter as LANTERN uses it for LlamaGen, written from its
description (shared notes relaxed_sd.md section 4; jadohu/LANTERN models/drafters/cnets_llamagen.py).

The drafter reads, at draft position i, the pair (f_i, x_{i+1}): the target's last hidden state
after its final norm at position i and the token that follows it. It computes
    h = fc(cat(embed(x_{i+1}), f_i))          (Linear 2H -> H with bias; embedding first; no act)
    h = h + attn(h)                            (one Llama layer; no input norm: EAGLE's layer 0)
    h = h + mlp(post_attention_layernorm(h))   (SwiGLU)
and returns h as its prediction of f_{i+1}; the logits are the target's own LM head applied to it
(the drafter has no final norm and no head). Rotary positions: LlamaGen's 2D table with the
drafter's prefix one shorter than the target's (the pair of the target's last prefix position is
the first image token's), i.e. the row of the token embedded.

Parameter names are those of LANTERN's released drafters (EAGLE's ea_layer state dict), so such a
state dict loads here with strict=True.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .llamagen import RMSNorm, apply_rotary_emb, precompute_freqs_cis_2d, sdpa_math


@dataclass
class EagleArgs:
    dim: int
    n_head: int
    n_kv_head: int
    ffn_dim: int
    vocab_size: int
    norm_eps: float = 1e-6
    rope_base: float = 10000.0
    grid: int = 16
    prefix_len: int = 0  # the drafter's prefix rows: the target's cls_token_num - 1


class EagleAttention(nn.Module):
    def __init__(self, a: EagleArgs):
        super().__init__()
        self.n_head, self.n_kv_head = a.n_head, a.n_kv_head
        self.head_dim = a.dim // a.n_head
        self.q_proj = nn.Linear(a.dim, a.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(a.dim, a.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(a.dim, a.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(a.n_head * self.head_dim, a.dim, bias=False)

    def forward(self, x, freqs_cis, mask, past=None):
        """x [B, S, H]; freqs_cis [S, hd/2, 2]; past: optional (k, v) [B, Hkv, P, hd] cached keys
        and values; mask [B or 1, S, P + S] bool (True = attend) or "causal". Returns (out, (k, v))
        with k, v including the past."""
        B, S, _ = x.shape
        q = apply_rotary_emb(self.q_proj(x).view(B, S, self.n_head, self.head_dim), freqs_cis)
        k = apply_rotary_emb(self.k_proj(x).view(B, S, self.n_kv_head, self.head_dim), freqs_cis)
        v = self.v_proj(x).view(B, S, self.n_kv_head, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
        rep = self.n_head // self.n_kv_head
        kk, vv = (k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)) if rep > 1 else (k, v)
        m = mask if isinstance(mask, str) else mask[:, None]
        out = sdpa_math(q, kk, vv, m).transpose(1, 2).reshape(B, S, -1)
        return self.o_proj(out), (k, v)


class EagleMLP(nn.Module):
    def __init__(self, a: EagleArgs):
        super().__init__()
        self.gate_proj = nn.Linear(a.dim, a.ffn_dim, bias=False)
        self.up_proj = nn.Linear(a.dim, a.ffn_dim, bias=False)
        self.down_proj = nn.Linear(a.ffn_dim, a.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class EagleLayer(nn.Module):
    """Llama decoder layer 0 of an EAGLE drafter: no input_layernorm."""

    def __init__(self, a: EagleArgs):
        super().__init__()
        self.self_attn = EagleAttention(a)
        self.mlp = EagleMLP(a)
        self.post_attention_layernorm = RMSNorm(a.dim, eps=a.norm_eps)

    def forward(self, h, freqs_cis, mask, past=None):
        a, kv = self.self_attn(h, freqs_cis, mask, past)
        h = h + a
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class EagleDrafter(nn.Module):
    def __init__(self, a: EagleArgs):
        super().__init__()
        self.args = a
        self.embed_tokens = nn.Embedding(a.vocab_size, a.dim)
        self.fc = nn.Linear(2 * a.dim, a.dim, bias=True)
        self.layers = nn.ModuleList([EagleLayer(a)])
        self.register_buffer("freqs_cis", precompute_freqs_cis_2d(a.grid, a.dim // a.n_head, a.rope_base,
                                                                  a.prefix_len), persistent=False)

    def forward(self, features, tokens, positions, mask="causal", past=None):
        """features [B, S, H] (f_i), tokens [B, S] (x_{i+1}), positions [S] or [B, S] rows of the
        rotary table. Returns (predicted next features [B, S, H], the layer's (k, v))."""
        h = self.fc(torch.cat([self.embed_tokens(tokens).to(features.dtype), features], -1))
        fc = self.freqs_cis[positions]
        if fc.dim() == 4:
            assert fc.size(0) == 1, "per-sequence positions: one batch row"
            fc = fc[0]
        return self.layers[0](h, fc, mask, past)


def drafter_positions(args: EagleArgs, first_token, n):
    """Rotary rows of n drafter rows whose embedded tokens are image tokens first_token, ..."""
    return torch.arange(args.prefix_len + first_token, args.prefix_len + first_token + n)
