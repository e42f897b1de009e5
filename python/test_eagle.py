#!/usr/bin/python3
"""Checks of the EAGLE reference (python/tessera_ref/eagle.py) and tools/convert_eagle.py:

- the reference drafter equals a second computation written out from LANTERN's description
  (fc over [embedding, feature], one Llama layer without input norm, LlamaGen's interleaved 2D
  rotary), and its cached incremental forward equals the full one;
- a drafter in LANTERN's layout converts, and the converted tensors are the originals;
- bad input is one line "error: ..." with exit code 2 naming the problem: a drafter whose width
  or vocabulary differs from the target's, two layers, a missing or extra tensor, a wrong shape,
  no weights file.

  /usr/bin/python3 python/test_eagle.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from make_eagle_fixtures import random_drafter, write_lantern  # noqa: E402
from tessera_ref.safetensors_io import read_safetensors  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
TOOL = os.path.join(ROOT, "tools", "convert_eagle.py")
TARGET = os.path.join(ROOT, "tests", "fixtures", "llamagen", "c2i_f32")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def by_hand(d, feats, tokens):
    """The drafter written out from its description, without the module's code paths."""
    a = d.args
    sd = {k: v.double() for k, v in d.state_dict().items()}
    x = torch.cat([sd["embed_tokens.weight"][tokens], feats.double()], -1) @ sd["fc.weight"].T + sd["fc.bias"]
    B, S, D = x.shape
    hd = D // a.n_head
    p = "layers.0."

    def heads(w):
        return (x @ sd[p + w].T).view(B, S, a.n_head, hd)

    def rope(t):  # interleaved pairs (2i, 2i+1), LlamaGen's apply_rotary_emb
        fc = d.freqs_cis[:S].double()
        c, s = fc[None, :, None, :, 0], fc[None, :, None, :, 1]
        t0, t1 = t[..., 0::2], t[..., 1::2]
        out = torch.empty_like(t)
        out[..., 0::2], out[..., 1::2] = t0 * c - t1 * s, t1 * c + t0 * s
        return out

    q, k, v = rope(heads("self_attn.q_proj.weight")), rope(heads("self_attn.k_proj.weight")), heads("self_attn.v_proj.weight")
    att = torch.einsum("bqhd,bkhd->bhqk", q, k) / hd ** 0.5
    att = att.masked_fill(~torch.tril(torch.ones(S, S, dtype=torch.bool)), float("-inf")).softmax(-1)
    o = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(B, S, D) @ sd[p + "self_attn.o_proj.weight"].T
    h = x + o
    n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + a.norm_eps) * sd[p + "post_attention_layernorm.weight"]
    m = (F.silu(n @ sd[p + "mlp.gate_proj.weight"].T) * (n @ sd[p + "mlp.up_proj.weight"].T)) @ sd[p + "mlp.down_proj.weight"].T
    return h + m


def main():
    torch.set_num_threads(1)
    gpt, d = random_drafter(TARGET, n_head=4, ffn_dim=96, seed=7, scale=1.0)
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(2, 16, 64, generator=g)
    tokens = torch.randint(0, 256, (2, 16), generator=g)
    with torch.no_grad():
        ref, _ = d(feats, tokens, torch.arange(16))
        err = float((ref.double() - by_hand(d, feats, tokens)).abs().max())
        check(err < 1e-4, f"the reference drafter equals the written-out computation (max diff {err:.2g})")
        # Incremental: 10 rows, then 6 with the cached keys and values.
        a, kv = d(feats[:, :10], tokens[:, :10], torch.arange(10))
        mask = torch.tril(torch.ones(6, 16, dtype=torch.bool), diagonal=10)[None].expand(2, -1, -1)
        b, _ = d(feats[:, 10:], tokens[:, 10:], torch.arange(10, 16), mask, kv)
        err = float((torch.cat([a, b], 1) - ref).abs().max())
        check(err < 1e-5, f"the cached incremental forward equals the full one (max diff {err:.2g})")

    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "lantern"), os.path.join(tmp, "out")
        write_lantern(d, src)
        r = subprocess.run([PY, TOOL, "--drafter", src, "--target", TARGET, "--out", out], capture_output=True, text=True)
        check(r.returncode == 0, "a drafter in LANTERN's layout converts: " + r.stdout.strip())
        st = read_safetensors(os.path.join(out, "eagle.safetensors"))
        same = all(torch.equal(st[k], v) for k, v in d.state_dict().items())
        check(same and len(st) == len(d.state_dict()), "the converted tensors are the drafter's own")
        cfg = json.load(open(os.path.join(out, "config.json")))
        check(cfg["architecture"] == "eagle" and cfg["eagle"]["prefix_len"] == 0 and cfg["eagle"]["grid"] == 4,
              "config.json: architecture eagle, the target's grid, prefix one row shorter")

        def bad(what, mutate, needles):
            bdir = os.path.join(tmp, what)
            write_lantern(d, bdir)
            mutate(bdir)
            r = subprocess.run([PY, TOOL, "--drafter", bdir, "--target", TARGET, "--out", os.path.join(tmp, "o_" + what)],
                               capture_output=True, text=True)
            lines = r.stderr.strip().splitlines()
            ok = r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and \
                all(n in lines[0] for n in needles)
            check(ok, f"{what}: {lines[0] if lines else '(no message)'}")
            check(not os.path.exists(os.path.join(tmp, "o_" + what, "config.json")), f"{what}: no config.json written")

        def edit_config(**kv):
            def f(p):
                c = json.load(open(os.path.join(p, "config.json")))
                c.update(kv)
                json.dump(c, open(os.path.join(p, "config.json"), "w"))
            return f

        def edit_weights(fn):
            def f(p):
                path = os.path.join(p, "pytorch_model.bin")
                sd = torch.load(path)
                fn(sd)
                torch.save(sd, path)
            return f

        bad("width", edit_config(hidden_size=32), ["hidden_size 32", "width is 64"])
        bad("vocabulary", edit_config(vocab_size=1024), ["vocab_size 1024", "vocabulary is 256"])
        bad("layers", edit_config(num_hidden_layers=2), ["num_hidden_layers 2"])
        bad("missing", edit_weights(lambda sd: sd.pop("fc.bias")), ["missing tensor fc.bias"])
        bad("extra", edit_weights(lambda sd: sd.__setitem__("layers.0.input_layernorm.weight", torch.ones(64))),
            ["unexpected tensor layers.0.input_layernorm.weight"])
        bad("shape", edit_weights(lambda sd: sd.__setitem__("fc.weight", torch.zeros(64, 64))),
            ["fc.weight", "[64, 64]", "[64, 128]"])
        bad("no_weights", lambda p: os.remove(os.path.join(p, "pytorch_model.bin")),
            ["neither model.safetensors nor pytorch_model.bin"])
    print(f"{len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
