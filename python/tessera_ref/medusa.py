"""PyTorch reference of Medusa's draft heads (Cai et al., 2024; FasterDecoding/Medusa e2a5d20,
shared notes jacobi_grouped_spatial.md section 4.1), as tessera runs them (src/models/medusa_heads.h).

Head k (k = 0..K-1) reads the target's last hidden state after its final norm at the row t whose
logits predict token t + 1, and predicts token t + 2 + k:
    y_k = h + SiLU(W_k h + b_k)          (Medusa's ResBlock, one layer per head)
    logits_k = lm_head(y_k)              (the target's own LM head: "medusa2", shared lm_head)
or, when the heads carry their own (Medusa-1's per-head Linear(h, V, bias=False)), that one.

Parameter names are Medusa's (`medusa_head.{k}.0.linear.{weight,bias}`, `medusa_head.{k}.1.weight`
for a per-head lm_head), so a Medusa state dict loads with strict=True.

HawkHeads (Chen et al., 2025, section 4.2 and App. C; shared notes section 3.2) adds D vertical heads
of the same ResBlock form, `vertical_head.{d}.0.linear.{weight,bias}`: vertical head d (0-based)
at the row t predicts the token (d + 1) image rows below token t + 1, token t + 1 + (d + 1) W.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from .atomic_io import atomic_write
from .safetensors_io import write_safetensors


class ResBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        nn.init.zeros_(self.linear.weight)  # Medusa: zero-init weight, so a head starts as identity

    def forward(self, x):
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    def __init__(self, dim, num_heads, vocab_size=0, per_head_lm_head=False):
        super().__init__()
        self.dim, self.num_heads, self.vocab_size = dim, num_heads, vocab_size
        self.per_head_lm_head = per_head_lm_head
        self.medusa_head = nn.ModuleList(
            nn.Sequential(ResBlock(dim), *([nn.Linear(dim, vocab_size, bias=False)] if per_head_lm_head else []))
            for _ in range(num_heads))

    def hidden(self, h):
        """[K, ..., dim]: every head's ResBlock output."""
        return torch.stack([head[0](h) for head in self.medusa_head])

    def forward(self, h, lm_head):
        """[K, ..., vocab] logits of every head for features h [..., dim]; lm_head: the target's."""
        y = self.hidden(h)
        if self.per_head_lm_head:
            return torch.stack([head[1](y[k]) for k, head in enumerate(self.medusa_head)])
        return lm_head(y)


class HawkHeads(MedusaHeads):
    def __init__(self, dim, horizontal_heads, vertical_heads, row_width, vocab_size=0):
        super().__init__(dim, horizontal_heads, vocab_size)
        self.vertical_heads, self.row_width = vertical_heads, row_width
        self.vertical_head = nn.ModuleList(nn.Sequential(ResBlock(dim)) for _ in range(vertical_heads))

    def vertical_hidden(self, h):
        """[D, ..., dim]: every vertical head's ResBlock output."""
        return torch.stack([head[0](h) for head in self.vertical_head])

    def vertical(self, h, lm_head):
        """[D, ..., vocab] logits of every vertical head for features h [..., dim]."""
        return lm_head(self.vertical_hidden(h))


def write_tessera_hawk(heads, out, dtype="f32"):
    """Hawk's heads as a tessera directory (docs/model_format.md, "hawk")."""
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    os.makedirs(out, exist_ok=True)
    sd = heads.state_dict()
    nbytes = write_safetensors(os.path.join(out, "hawk.safetensors"),
                               [(k, sd[k].detach().to(dt).contiguous()) for k in sorted(sd)])
    cfg = {"file": "hawk.safetensors", "horizontal_heads": heads.num_heads,
           "vertical_heads": heads.vertical_heads, "row_width": heads.row_width, "dim": heads.dim,
           "vocab_size": heads.vocab_size, "feature": "post_norm", "dtype": dtype}
    with atomic_write(os.path.join(out, "config.json"), "w") as f:
        json.dump({"tessera_format": 1, "architecture": "hawk", "hawk": cfg}, f, indent=2)
        f.write("\n")
    return nbytes


def write_tessera(heads, out, dtype="f32"):
    """The heads as a tessera directory (docs/model_format.md, "medusa")."""
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    os.makedirs(out, exist_ok=True)
    sd = heads.state_dict()
    nbytes = write_safetensors(os.path.join(out, "medusa.safetensors"),
                               [(k, sd[k].detach().to(dt).contiguous()) for k in sorted(sd)])
    cfg = {"file": "medusa.safetensors", "num_heads": heads.num_heads, "dim": heads.dim,
           "vocab_size": heads.vocab_size, "lm_head": "per_head" if heads.per_head_lm_head else "shared",
           "feature": "post_norm", "dtype": dtype}
    with atomic_write(os.path.join(out, "config.json"), "w") as f:
        json.dump({"tessera_format": 1, "architecture": "medusa", "medusa": cfg}, f, indent=2)
        f.write("\n")
    return nbytes
