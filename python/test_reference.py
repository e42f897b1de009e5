#!/usr/bin/python3
"""Quick self-check of the Python side: converter round trip and validation errors, and the
reference's teacher-forcing path against its KV-cache decode path.

  /usr/bin/python3 python/test_reference.py
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

from make_test_fixtures import TINY, tiny_models, vq_args  # noqa: E402
from tessera_ref.llamagen import (Transformer, VQDecoderModel, caption_mask,  # noqa: E402
                                  forward_logits, generate)
from tessera_ref.safetensors_io import read_safetensors, write_safetensors  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
CONVERTER = os.path.join(ROOT, "tools", "convert_llamagen.py")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def run_convert(gpt, out, model_type="c2i", dtype="f32", vq=None, extra=()):
    cmd = [PY, CONVERTER, "--gpt", gpt, "--out", out, "--gpt-model", "custom",
           "--dim", str(TINY["dim"]), "--n-layer", str(TINY["n_layer"]), "--n-head", str(TINY["n_head"]),
           "--image-size", str(TINY["image_size"]), "--downsample", str(TINY["downsample"]),
           "--model-type", model_type, "--num-classes", str(TINY["num_classes"]),
           "--caption-dim", str(TINY["caption_dim"]), "--vocab-size", str(TINY["vocab_size"]),
           "--dtype", dtype]
    if model_type == "t2i":
        cmd += ["--cls-token-num", str(TINY["t2i_T"])]
    if vq:
        cmd += ["--vq", vq]
    cmd += list(extra)
    return subprocess.run(cmd, capture_output=True, text=True)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def main():
    torch.set_num_threads(min(4, torch.get_num_threads()))
    g = torch.Generator().manual_seed(99)
    c2i, t2i, vq = tiny_models(g)
    tmp = tempfile.mkdtemp(prefix="tessera_test_ref_")

    # ---------------- (a) converter round trip
    c2i_pt = os.path.join(tmp, "c2i.pt")
    t2i_pt = os.path.join(tmp, "t2i.pt")
    vq_pt = os.path.join(tmp, "vq.pt")
    sd = c2i.state_dict()
    sd_with_junk = dict(sd)
    sd_with_junk["freqs_cis"] = torch.zeros(3, 2)
    sd_with_junk["layers.0.attention.kv_cache.k_cache"] = torch.zeros(1)
    torch.save({"model": sd_with_junk}, c2i_pt)
    torch.save(t2i.state_dict(), t2i_pt)  # raw state dict (like XXL / 3B)
    vsd = vq.state_dict()  # full VQ incl. encoder, quant_conv, codebook_used
    torch.save({"model": {k: torch.zeros_like(v) for k, v in vsd.items()}, "ema": vsd}, vq_pt)

    for mt, pt, model in (("c2i", c2i_pt, c2i), ("t2i", t2i_pt, t2i)):
        ref = model.state_dict()
        for dt, tdt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
            out = os.path.join(tmp, f"{mt}_{dt}")
            r = run_convert(pt, out, mt, dt, vq=vq_pt if dt == "f32" else None)
            check(r.returncode == 0, f"convert {mt} {dt} exits 0 {r.stderr.strip()}")
            if r.returncode != 0:
                continue
            st = read_safetensors(os.path.join(out, "gpt.safetensors"))
            check(set(st) == set(ref), f"{mt} {dt}: gpt.safetensors has exactly the state-dict keys")
            check(all(same(st[k], ref[k].to(tdt)) for k in ref if k in st),
                  f"{mt} {dt}: every tensor equals the {'exact' if dt == 'f32' else dt + '-rounded'} original")
            cfg = json.load(open(os.path.join(out, "config.json")))
            gc = cfg["gpt"]
            check(gc["dtype"] == dt and gc["model_type"] == mt and gc["grid"] == 4 and gc["ffn_dim"] == 256
                  and gc["cls_token_num"] == (1 if mt == "c2i" else TINY["t2i_T"]),
                  f"{mt} {dt}: config.json gpt section")
            if dt == "f32":
                vst = read_safetensors(os.path.join(out, "vq.safetensors"))
                dec = VQDecoderModel(vq_args())
                dkeys = set(dec.state_dict())
                check(set(vst) == dkeys, f"{mt}: vq.safetensors holds exactly the decode-path tensors")
                check(all(same(vst[k], vsd[k]) for k in dkeys if k in vst),
                      f"{mt}: vq tensors equal the 'ema' state dict (preferred over 'model')")
                vc = cfg["vq"]
                check(vc["ch"] == 32 and vc["ch_mult"] == [1, 2, 2] and vc["z_channels"] == 32
                      and vc["num_res_blocks"] == 1 and vc["codebook_size"] == 256
                      and vc["codebook_embed_dim"] == 8, f"{mt}: custom VQ config inferred from shapes {vc}")
                dec.load_state_dict(vst)
                idx = torch.randint(0, 256, (2, 16), generator=g)
                with torch.no_grad():
                    check(torch.equal(dec.eval().decode_code(idx), vq.decode_code(idx)),
                          f"{mt}: decoder loaded from vq.safetensors decodes like the original")

    # VQ given as a .safetensors file (like FoundationVision/vq-ds16-c2i)
    vq_st = os.path.join(tmp, "vq_model.safetensors")
    write_safetensors(vq_st, list(vsd.items()))
    out = os.path.join(tmp, "c2i_vqst")
    r = run_convert(c2i_pt, out, vq=vq_st)
    check(r.returncode == 0, f"convert with a .safetensors VQ exits 0 {r.stderr.strip()}")
    if r.returncode == 0:
        vst = read_safetensors(os.path.join(out, "vq.safetensors"))
        check(all(same(v, vsd[k]) for k, v in vst.items()), "safetensors VQ round trip")

    # ---------------- (b) converter rejects bad checkpoints
    def expect_error(sd_bad, name, what):
        p = os.path.join(tmp, "bad.pt")
        torch.save({"model": sd_bad}, p)
        r = run_convert(p, os.path.join(tmp, "bad_out"))
        msg = r.stderr.strip()
        check(r.returncode == 2 and name in msg and "Traceback" not in msg and len(msg.splitlines()) == 1,
              f"{what}: exit {r.returncode}, message: {msg}")

    bad = dict(sd)
    bad["layers.1.attention.wqkv.weight"] = torch.zeros(100, 64)
    expect_error(bad, "layers.1.attention.wqkv.weight", "wrong shape rejected")
    bad = dict(sd)
    del bad["layers.0.ffn_norm.weight"]
    expect_error(bad, "layers.0.ffn_norm.weight", "missing tensor rejected")
    bad = dict(sd)
    bad["layers.0.attention.bias"] = torch.zeros(3)
    expect_error(bad, "layers.0.attention.bias", "unexpected tensor rejected")
    r = run_convert(t2i_pt, os.path.join(tmp, "bad_out2"), "c2i")
    check(r.returncode == 2 and "cls_embedding.embedding_table.weight" in r.stderr,
          f"t2i checkpoint as c2i rejected: {r.stderr.strip()}")
    r = subprocess.run([PY, CONVERTER, "--gpt", c2i_pt, "--out", os.path.join(tmp, "bad_out3"),
                        "--gpt-model", "GPT-B"], capture_output=True, text=True)
    check(r.returncode == 2 and "GPT-B expects" in r.stderr, f"tiny checkpoint as GPT-B rejected: {r.stderr.strip()}")

    # ---------------- (c) teacher forcing == KV-cache incremental decode
    toks = torch.randint(0, TINY["vocab_size"], (15,), generator=g)
    cap = torch.zeros(TINY["t2i_T"], TINY["caption_dim"])
    cap[2:] = torch.randn(TINY["t2i_T"] - 2, TINY["caption_dim"], generator=g)
    for name, model, cond in (("c2i class 3", c2i, 3), ("c2i uncond", c2i, None),
                              ("t2i caption", t2i, cap), ("t2i uncond", t2i, None)):
        # f32: differences come only from GEMM shapes (rounding), so compare relative to the scale;
        # f64 copy: the two paths must agree to 1e-5 absolute.
        a = forward_logits(model, cond, toks)
        b = forward_logits(model, cond, toks, incremental=True)
        err = (a - b).abs().max().item()
        scale = a.abs().max().item()
        check(a.shape == (16, 256) and err <= 1e-5 * max(1.0, scale),
              f"{name}: forward_logits vs incremental (f32) max diff {err:.2e} (max |logit| {scale:.1f})")
        m64 = Transformer(model.config).eval()
        m64.load_state_dict(model.state_dict())
        m64 = m64.double()
        c64 = cond.double() if torch.is_tensor(cond) else cond
        a = forward_logits(m64, c64, toks)
        b = forward_logits(m64, c64, toks, incremental=True)
        err = (a - b).abs().max().item()
        check(err <= 1e-5, f"{name}: forward_logits vs incremental (f64 weights) max diff {err:.2e}")
    # generate (no CFG, greedy) must see the same logits as teacher forcing on its own tokens
    with torch.no_grad():
        for name, model, cond, cf, em in (("c2i", c2i, torch.tensor([5]), 5, None),
                                          ("t2i", t2i, cap.unsqueeze(0), cap, caption_mask(cap))):
            trace = []
            out = generate(model, cond, 16, cfg_scale=1.0, temperature=0.0, sample_logits=False,
                           emb_masks=em, trace=trace)
            tf = forward_logits(model, cf, out[0, :15].long())
            err = (torch.cat(trace) - tf).abs().max().item()
            check(err <= 1e-5 * max(1.0, tf.abs().max().item()), f"{name}: generate() step logits vs forward_logits max diff {err:.2e}")
            trace2 = []
            generate(model, cond, 16, cfg_scale=3.0, temperature=0.0, sample_logits=False,
                     emb_masks=em, trace=trace2)
            check(len(trace2) == 16 and all(t.shape == (1, 256) for t in trace2), f"{name}: CFG generate runs")

    # ---------------- (d) committed fixtures are consistent with the reference (if present)
    fx = os.path.join(ROOT, "tests", "fixtures", "llamagen")
    if os.path.isdir(os.path.join(fx, "golden")):
        import numpy as np
        from tessera_ref.llamagen import load_tessera_gpt
        gd = lambda n: torch.from_numpy(np.load(os.path.join(fx, "golden", n)))  # noqa: E731
        toks = gd("tokens.npy").long()
        cap = gd("caption.npy")
        for d, cond, gname in (("c2i_f32", 3, "c2i_class3_f32.npy"), ("c2i_f32", None, "c2i_uncond_f32.npy"),
                               ("c2i_bf16", 3, "c2i_class3_bf16w.npy"), ("c2i_f16", 3, "c2i_class3_f16w.npy"),
                               ("t2i_f32", cap, "t2i_caption_f32.npy"), ("t2i_f32", None, "t2i_uncond_f32.npy"),
                               ("t2i_bf16", cap, "t2i_caption_bf16w.npy")):
            m = load_tessera_gpt(os.path.join(fx, d)).eval()
            a = forward_logits(m, cond, toks)
            err = (a - gd(gname)).abs().max().item()
            check(err <= 1e-5 * max(1.0, a.abs().max().item()), f"fixture {d} reproduces {gname} (max diff {err:.2e})")
        dec = VQDecoderModel(vq_args()).eval()
        dec.load_state_dict(read_safetensors(os.path.join(fx, "c2i_f32", "vq.safetensors")))
        with torch.no_grad():
            x = dec.decode_code(gd("vq_tokens.npy").long())
        err = (x - gd("vq_decoded.npy")).abs().max().item()
        check(err <= 1e-5, f"fixture vq.safetensors reproduces vq_decoded.npy (max diff {err:.2e})")
    else:
        print("skip  no fixtures under tests/fixtures/llamagen (run python/make_test_fixtures.py)")

    print("FAILED: %d check(s)" % len(FAILS) if FAILS else "all checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
