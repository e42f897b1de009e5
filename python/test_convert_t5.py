#!/usr/bin/python3
"""tools/convert_t5.py against the committed T5 fixtures (tests/fixtures/t5, made by
python/make_t5_fixtures.py with transformers): the HF directory converts to the committed f32 and
bf16 directories, as do sharded safetensors, pytorch_model.bin (single and sharded) and full
encoder-decoder copies of it; bad inputs are refused with exit code 2 and one "error:" line.
Debian's python3 only (torch, numpy; no transformers).

  /usr/bin/python3 python/test_convert_t5.py
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from tessera_ref.safetensors_io import read_safetensors, write_safetensors  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
CONVERTER = os.path.join(ROOT, "tools", "convert_t5.py")
FIX = os.path.join(ROOT, "tests", "fixtures", "t5")
HF = os.path.join(FIX, "hf")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def convert(hf, out, *extra):
    return subprocess.run([PY, CONVERTER, "--hf", hf, "--out", out, *extra], capture_output=True, text=True)


def same_dir(out, ref, what):
    """out's t5.safetensors, config.json and spiece.model equal ref's (tensors and bytes)."""
    a = read_safetensors(os.path.join(out, "t5.safetensors"))
    b = read_safetensors(os.path.join(ref, "t5.safetensors"))
    bad = [k for k in b if k not in a or a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    check(list(a) == list(b) and not bad, f"{what}: tensors equal the committed {os.path.basename(ref)} "
          f"({len(b)} tensors){' differ: ' + str(bad[:3]) if bad else ''}{'' if list(a) == list(b) else ' (names or order differ)'}")
    check(filecmp.cmp(os.path.join(out, "t5.safetensors"), os.path.join(ref, "t5.safetensors"), shallow=False),
          f"{what}: t5.safetensors is byte-identical")
    with open(os.path.join(out, "config.json")) as f:
        ca = json.load(f)
    with open(os.path.join(ref, "config.json")) as f:
        cb = json.load(f)
    check(ca == cb, f"{what}: config.json equals the committed one")
    check(filecmp.cmp(os.path.join(out, "spiece.model"), os.path.join(HF, "spiece.model"), shallow=False),
          f"{what}: spiece.model copied byte for byte")


def copy_hf(tmp, name, weights=True):
    """A copy of the fixture's HF directory without its weights (weights=False) or with them."""
    d = os.path.join(tmp, name)
    shutil.copytree(HF, d)
    if not weights:
        os.remove(os.path.join(d, "model.safetensors"))
    return d


def write_index(d, shards, kind):
    """shards: [dict name -> tensor]; kind "safetensors" or "bin"; writes the shards and the index."""
    n = len(shards)
    wm = {}
    for i, sd in enumerate(shards):
        if kind == "safetensors":
            fn = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            write_safetensors(os.path.join(d, fn), list(sd.items()))
            index = "model.safetensors.index.json"
        else:
            fn = f"pytorch_model-{i + 1:05d}-of-{n:05d}.bin"
            torch.save(sd, os.path.join(d, fn))
            index = "pytorch_model.bin.index.json"
        wm.update({k: fn for k in sd})
    with open(os.path.join(d, index), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)


def expect_error(tmp, name, hf, must, what):
    """The converter exits 2 with one line "error: ..." holding every string of must."""
    out = os.path.join(tmp, name + "_out")
    r = convert(hf, out)
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
          and all(s in lines[0] for s in must))
    check(ok, f"refused, {what}: rc {r.returncode}: {r.stderr.strip()}")
    check(not os.path.exists(os.path.join(out, "config.json")), f"  ... and no config.json was written ({name})")


def edit_config(d, **changes):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    with open(p, "w") as f:
        json.dump(c, f)


def main():
    tmp = tempfile.mkdtemp(prefix="tessera_t5_conv_")
    sd = read_safetensors(os.path.join(HF, "model.safetensors"))
    names = list(sd)
    try:
        # ---- the fixture's HF directory, as committed
        out = os.path.join(tmp, "f32")
        r = convert(HF, out)
        check(r.returncode == 0, f"convert hf (default dtype) exits 0 {r.stderr.strip()}")
        if r.returncode == 0:
            same_dir(out, os.path.join(FIX, "f32"), "hf, default dtype (the source's: f32)")
        out = os.path.join(tmp, "bf16")
        r = convert(HF, out, "--dtype", "bf16")
        check(r.returncode == 0, f"convert hf --dtype bf16 exits 0 {r.stderr.strip()}")
        if r.returncode == 0:
            same_dir(out, os.path.join(FIX, "bf16"), "hf --dtype bf16")

        # ---- other layouts of the same weights
        def layout(name, build, ref="f32"):
            d = copy_hf(tmp, name, weights=False)
            build(d)
            out = os.path.join(tmp, name + "_out")
            r = convert(d, out, "--dtype", ref)
            check(r.returncode == 0, f"convert {name} exits 0 {r.stderr.strip()}")
            if r.returncode == 0:
                same_dir(out, os.path.join(FIX, ref), name)

        half = len(names) // 2
        shards = [{k: sd[k] for k in names[:half]}, {k: sd[k] for k in names[half:]}]
        layout("sharded_safetensors", lambda d: write_index(d, shards, "safetensors"))
        layout("pytorch_model_bin", lambda d: torch.save(dict(sd), os.path.join(d, "pytorch_model.bin")))
        layout("sharded_bin", lambda d: write_index(d, shards, "bin"))

        def full_model(d):
            """A T5ForConditionalGeneration-like checkpoint: decoder, lm_head, tied encoder embedding."""
            full = dict(sd)
            full["encoder.embed_tokens.weight"] = sd["shared.weight"].clone()
            full["decoder.embed_tokens.weight"] = sd["shared.weight"].clone()
            full["decoder.block.0.layer.0.SelfAttention.q.weight"] = torch.randn(32, 32)
            full["decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] = torch.randn(32, 4)
            full["decoder.final_layer_norm.weight"] = torch.ones(32)
            full["lm_head.weight"] = torch.randn(sd["shared.weight"].shape)
            write_index(d, [dict(list(full.items())[:7]), dict(list(full.items())[7:])], "safetensors")
        layout("full_encoder_decoder", full_model)

        def embed_tokens_only(d):
            e = {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v for k, v in sd.items()}
            torch.save(e, os.path.join(d, "pytorch_model.bin"))
        layout("encoder_embed_tokens_only", embed_tokens_only)

        def bf16_source(d):
            write_safetensors(os.path.join(d, "model.safetensors"), [(k, v.to(torch.bfloat16)) for k, v in sd.items()])
        d = copy_hf(tmp, "bf16_source", weights=False)
        bf16_source(d)
        out = os.path.join(tmp, "bf16_source_out")
        r = convert(d, out)  # default dtype: the source's
        check(r.returncode == 0, f"convert a bf16 checkpoint exits 0 {r.stderr.strip()}")
        if r.returncode == 0:
            same_dir(out, os.path.join(FIX, "bf16"), "bf16 checkpoint, default dtype (bf16)")

        # ---- refusals
        d = copy_hf(tmp, "relu")
        edit_config(d, feed_forward_proj="relu", dense_act_fn="relu", is_gated_act=False)
        expect_error(tmp, "relu", d, ["config.json", "feed_forward_proj", "relu", "T5 v1.1", "flan-T5"],
                     "original T5 (feed_forward_proj relu)")
        d = copy_hf(tmp, "no_ffp")
        edit_config(d, feed_forward_proj=None)
        expect_error(tmp, "no_ffp", d, ["config.json", "feed_forward_proj", "relu"],
                     "no feed_forward_proj (transformers' default relu)")
        d = copy_hf(tmp, "umt5")
        edit_config(d, model_type="umt5")
        expect_error(tmp, "umt5", d, ["config.json", "umt5", "every layer"], "model_type umt5")
        d = copy_hf(tmp, "bert")
        edit_config(d, model_type="bert")
        expect_error(tmp, "bert", d, ["config.json", "model_type", "bert"], "model_type bert")
        d = copy_hf(tmp, "abspos")
        edit_config(d, position_embedding_type="absolute")
        expect_error(tmp, "abspos", d, ["config.json", "absolute position"], "position_embedding_type absolute")

        missing = "encoder.block.1.layer.1.DenseReluDense.wo.weight"
        d = copy_hf(tmp, "missing_tensor", weights=False)
        write_safetensors(os.path.join(d, "model.safetensors"), [(k, v) for k, v in sd.items() if k != missing])
        expect_error(tmp, "missing_tensor", d, ["model.safetensors", "missing tensor", missing, "[32, 64]"],
                     "a missing tensor")
        d = copy_hf(tmp, "missing_shard_tensor", weights=False)
        write_index(d, [{k: v for k, v in shards[0].items()}, {k: v for k, v in shards[1].items() if k != missing}],
                    "safetensors")
        expect_error(tmp, "missing_shard_tensor", d, ["model.safetensors.index.json", "missing tensor", missing],
                     "a missing tensor, sharded")
        d = copy_hf(tmp, "missing_shard_file", weights=False)
        write_index(d, shards, "bin")
        os.remove(os.path.join(d, "pytorch_model-00002-of-00002.bin"))
        expect_error(tmp, "missing_shard_file", d, ["pytorch_model-00002-of-00002.bin", "not found"],
                     "a shard listed in the index but absent")
        bad = "encoder.block.0.layer.0.SelfAttention.k.weight"
        d = copy_hf(tmp, "wrong_shape", weights=False)
        torch.save({k: (v[:, :16].contiguous() if k == bad else v) for k, v in sd.items()},
                   os.path.join(d, "pytorch_model.bin"))
        expect_error(tmp, "wrong_shape", d, ["pytorch_model.bin", bad, "[32, 16]", "expects [32, 32]"],
                     "a tensor of the wrong shape")
        d = copy_hf(tmp, "umt5_bias", weights=False)
        extra = dict(sd)
        extra["encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"] = torch.zeros(32, 4)
        write_safetensors(os.path.join(d, "model.safetensors"), list(extra.items()))
        expect_error(tmp, "umt5_bias", d, ["model.safetensors", "encoder.block.1.layer.0.SelfAttention."
                                           "relative_attention_bias.weight", "unexpected"],
                     "a relative attention bias in layer 1")
        d = copy_hf(tmp, "no_weights", weights=False)
        expect_error(tmp, "no_weights", d, ["no weights", "model.safetensors"], "no weight files")
        d = copy_hf(tmp, "no_config")
        os.remove(os.path.join(d, "config.json"))
        expect_error(tmp, "no_config", d, ["config.json", "not found"], "no config.json")
        d = copy_hf(tmp, "no_spiece")
        os.remove(os.path.join(d, "spiece.model"))
        expect_error(tmp, "no_spiece", d, ["spiece.model", "not found"], "no spiece.model")
        d = copy_hf(tmp, "text_spiece")
        with open(os.path.join(d, "spiece.model"), "w") as f:
            f.write("\u2581the -1.5\n\u2581a -2.0\n")
        expect_error(tmp, "text_spiece", d, ["spiece.model", "not a SentencePiece model"],
                     "a spiece.model that is text (a vocab listing)")
        d = copy_hf(tmp, "newline_spiece")
        with open(os.path.join(d, "spiece.model"), "w") as f:
            f.write("\nthis starts like field 1 but is text\n")
        expect_error(tmp, "newline_spiece", d, ["spiece.model", "not a SentencePiece model"],
                     "a text spiece.model whose first byte is 0x0a")
        d = copy_hf(tmp, "empty_spiece")
        open(os.path.join(d, "spiece.model"), "w").close()
        expect_error(tmp, "empty_spiece", d, ["spiece.model", "empty"], "an empty spiece.model")

        # ---- tools/convert_llamagen.py --text-encoder: a t2i model that names its T5 encoder
        lg = os.path.join(ROOT, "tools", "convert_llamagen.py")
        base = [sys.executable, lg, "--gpt", os.path.join(ROOT, "tests", "fixtures", "llamagen", "pt", "t2i_gpt.pt"),
                "--gpt-model", "custom", "--dim", "64", "--n-layer", "2", "--n-head", "4", "--image-size", "16",
                "--downsample", "4", "--caption-dim", "32", "--vocab-size", "256"]
        out = os.path.join(tmp, "t2i")
        r = subprocess.run(base + ["--model-type", "t2i", "--cls-token-num", "8", "--out", out, "--text-encoder",
                                   os.path.join(FIX, "f32")], capture_output=True, text=True)
        check(r.returncode == 0, f"convert_llamagen --text-encoder exits 0 {r.stderr.strip()}")
        if r.returncode == 0:
            with open(os.path.join(out, "config.json")) as f:
                te = json.load(f).get("companions", {}).get("text_encoder", "")
            check(os.path.realpath(os.path.join(out, te)) == os.path.realpath(os.path.join(FIX, "f32")),
                  f"  ... config.json's companions name the encoder relative to the model ({te})")
        for name, extra, must in (
                ("c2i", ["--model-type", "c2i", "--text-encoder", os.path.join(FIX, "f32")], "t2i"),
                ("not_t5", ["--model-type", "t2i", "--cls-token-num", "8", "--text-encoder", HF], "not a tessera T5 encoder")):
            r = subprocess.run(base + extra + ["--out", os.path.join(tmp, name)], capture_output=True, text=True)
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 2 and len(lines) == 1 and must in lines[0],
                  f"convert_llamagen --text-encoder refused ({name}): rc {r.returncode}: {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if FAILS:
        print(f"\n{len(FAILS)} check(s) failed")
        return 1
    print("\nall T5 converter checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
