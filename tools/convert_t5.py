#!/usr/bin/python3
"""Convert a Hugging Face T5 v1.1 / flan-T5 / mT5 checkpoint into a tessera T5 text encoder
directory (docs/model_format.md, "T5 text encoder directories").

  /usr/bin/python3 tools/convert_t5.py --hf pretrained_models/t5-ckpt/flan-t5-xl --out models/flan-t5-xl \
      [--dtype f32|bf16|f16]

HF_DIR holds config.json, spiece.model and the weights: model.safetensors, sharded
model-XXXXX-of-YYYYY.safetensors with model.safetensors.index.json, pytorch_model.bin, or sharded
pytorch_model-*.bin with pytorch_model.bin.index.json. Only the encoder is kept (a full
T5ForConditionalGeneration's decoder.* and lm_head.* are skipped). --dtype defaults to the dtype of
the checkpoint's matrices. Needs torch and numpy only (no transformers, no sentencepiece).

Every expected tensor name and shape is validated against config.json; user errors print one
line "error: ..." and exit with code 2.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

from tessera_ref.atomic_io import atomic_write, write_bytes_atomic  # noqa: E402
from tessera_ref.convert_common import UserError, run_converter, shape_str  # noqa: E402
from tessera_ref.safetensors_io import DTYPES, read_header, read_safetensors, write_safetensors  # noqa: E402

TORCH_TO_NAME = {v[1]: k for k, v in DTYPES.items()}
EMBED_NAMES = ("shared.weight", "encoder.embed_tokens.weight")


# ----------------------------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------------------------

def read_config(hf):
    path = os.path.join(hf, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{path}: file not found (a Hugging Face T5 directory has config.json)")
    try:
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read JSON: {e}")
    if not isinstance(c, dict):
        raise UserError(f"{path}: not a JSON object")

    mt = c.get("model_type")
    if mt == "umt5":
        raise UserError(f"{path}: model_type \"umt5\" is not supported: UMT5 has a relative position bias "
                        "in every layer; tessera runs T5 v1.1 / flan-T5 / mT5 encoders (model_type t5 or mt5)")
    if mt not in ("t5", "mt5"):
        raise UserError(f"{path}: model_type is {json.dumps(mt)}, expected \"t5\" or \"mt5\" "
                        "(tessera runs T5 v1.1 / flan-T5 / mT5 encoders)")
    ffp = c.get("feed_forward_proj", "relu")  # transformers' T5Config default
    if ffp != "gated-gelu":
        what = " (original T5)" if ffp == "relu" else ""
        raise UserError(f"{path}: feed_forward_proj is {json.dumps(ffp)}{what}; tessera runs T5 v1.1 / "
                        "flan-T5 encoders, whose feed-forward is \"gated-gelu\" (gelu_new)")
    if c.get("dense_act_fn", "gelu_new") != "gelu_new":
        raise UserError(f"{path}: dense_act_fn is {json.dumps(c['dense_act_fn'])}, expected \"gelu_new\" "
                        "for gated-gelu")
    # T5 has relative position biases only. ("n_positions", which old T5 configs carry, is unused
    # by transformers' T5 and accepted.)
    pet = c.get("position_embedding_type")
    if pet is not None and pet != "relative":
        raise UserError(f"{path}: position_embedding_type {json.dumps(pet)}: absolute position embeddings "
                        "are not part of T5 (relative attention bias only)")
    for k in ("use_absolute_position_embeddings", "absolute_position_embedding", "use_abs_pos",
              "max_position_embeddings"):
        if c.get(k):
            raise UserError(f"{path}: {k} = {json.dumps(c[k])}: absolute position embeddings are not part of "
                            "T5 (relative attention bias only)")

    def geti(k, default=None):
        v = c.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise UserError(f"{path}: {k} must be a positive integer (got {json.dumps(v)})")
        return v

    def getid(k, default):
        v = c.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise UserError(f"{path}: {k} must be a token id, a non-negative integer (got {json.dumps(v)})")
        return v

    eps = c.get("layer_norm_epsilon", 1e-6)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise UserError(f"{path}: layer_norm_epsilon must be a positive number (got {json.dumps(eps)})")
    t5 = {
        "vocab_size": geti("vocab_size"),
        "d_model": geti("d_model"),
        "d_kv": geti("d_kv"),
        "d_ff": geti("d_ff"),
        "num_layers": geti("num_layers"),
        "num_heads": geti("num_heads"),
        "relative_attention_num_buckets": geti("relative_attention_num_buckets", 32),
        "relative_attention_max_distance": geti("relative_attention_max_distance", 128),
        "layer_norm_epsilon": float(eps),
    }
    tok = {"eos_id": getid("eos_token_id", 1), "pad_id": getid("pad_token_id", 0)}
    for k in ("eos_id", "pad_id"):
        if tok[k] >= t5["vocab_size"]:
            raise UserError(f"{path}: {k[:-3]}_token_id {tok[k]} is not below vocab_size {t5['vocab_size']}")
    return t5, tok


def expected_tensors(t5):
    """Ordered name -> shape of the tessera t5.safetensors (transformers' names)."""
    V, D, F, L, H = t5["vocab_size"], t5["d_model"], t5["d_ff"], t5["num_layers"], t5["num_heads"]
    I = H * t5["d_kv"]  # noqa: E741
    e = {"shared.weight": [V, D]}
    for i in range(L):
        a = f"encoder.block.{i}.layer.0."
        for s in ("q", "k", "v"):
            e[a + f"SelfAttention.{s}.weight"] = [I, D]
        e[a + "SelfAttention.o.weight"] = [D, I]
        if i == 0:
            e[a + "SelfAttention.relative_attention_bias.weight"] = [t5["relative_attention_num_buckets"], H]
        e[a + "layer_norm.weight"] = [D]
        f = f"encoder.block.{i}.layer.1."
        e[f + "DenseReluDense.wi_0.weight"] = [F, D]
        e[f + "DenseReluDense.wi_1.weight"] = [F, D]
        e[f + "DenseReluDense.wo.weight"] = [D, F]
        e[f + "layer_norm.weight"] = [D]
    e["encoder.final_layer_norm.weight"] = [D]
    return e


def is_skipped(name):
    """Tensors of a full checkpoint that the encoder does not use."""
    return name.startswith(("decoder.", "lm_head.")) or name == "encoder.embed_tokens.weight"


# ----------------------------------------------------------------------------------------------
# weights
# ----------------------------------------------------------------------------------------------

def weight_files(hf):
    """[(file, names or None)] and the file to name in errors about the whole set."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        sp = os.path.join(hf, single)
        if os.path.isfile(sp):
            return [sp], sp
        ip = os.path.join(hf, index)
        if os.path.isfile(ip):
            try:
                with open(ip, encoding="utf-8") as f:
                    wm = json.load(f)["weight_map"]
                if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                    raise ValueError("weight_map is not an object of file names")
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise UserError(f"{ip}: not a weight index ({type(e).__name__}: {e})")
            files = []
            for fn in sorted(set(wm.values())):
                p = os.path.join(hf, fn)
                if not os.path.isfile(p):
                    raise UserError(f"{p}: file not found (listed in {index})")
                files.append(p)
            return files, ip
    raise UserError(f"{hf}: no weights found (model.safetensors, model.safetensors.index.json, "
                    "pytorch_model.bin or pytorch_model.bin.index.json)")


def load_weights(hf, wanted):
    """name -> (tensor, file) for the wanted names found; also every name seen -> file."""
    files, what = weight_files(hf)
    found, seen = {}, {}
    for p in files:
        if p.endswith(".safetensors"):
            try:
                _, hdr = read_header(p)
                for k in hdr:
                    seen[k] = p
                sd = read_safetensors(p, names=wanted)
            except Exception as e:  # noqa: BLE001
                raise UserError(f"{p}: cannot read safetensors file: {e}")
        else:
            try:
                sd = torch.load(p, map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001
                raise UserError(f"{p}: cannot load with torch.load(weights_only=True): {type(e).__name__}: {e}")
            if not isinstance(sd, dict):
                raise UserError(f"{p}: does not hold a state dict (got {type(sd).__name__})")
            for k in sd:
                seen[k] = p
            sd = {k: v for k, v in sd.items() if k in wanted}
        for k, v in sd.items():
            if not torch.is_tensor(v):
                raise UserError(f"{p}: entry {k!r} is not a tensor ({type(v).__name__})")
            found[k] = (v, p)
        del sd
    return found, seen, what


def validate(found, seen, what, exp):
    for name in seen:
        if "position_embed" in name and "relative" not in name:
            raise UserError(f"{seen[name]}: tensor {name}: absolute position embeddings are not part of T5 "
                            "(relative attention bias only)")
        if name.startswith("encoder.") and name not in exp and not is_skipped(name):
            hint = (" (a relative attention bias in a layer other than 0: UMT5-style, not supported)"
                    if "relative_attention_bias" in name else "")
            raise UserError(f"{seen[name]}: unexpected encoder tensor {name}{hint}")
    for name, shape in exp.items():
        if name not in found:
            raise UserError(f"{what}: missing tensor {name} (expected shape {shape_str(shape)} from config.json)")
        t, p = found[name]
        if list(t.shape) != list(shape):
            raise UserError(f"{p}: {name} has shape {shape_str(t.shape)} but config.json expects "
                            f"{shape_str(shape)}")
        if not t.is_floating_point():
            raise UserError(f"{p}: {name} has non-float dtype {t.dtype}")


# ----------------------------------------------------------------------------------------------
# spiece.model
# ----------------------------------------------------------------------------------------------

def _varint(b, i):
    v, shift = 0, 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b):
    """Top-level protobuf fields of b: [(field number, wire type, value)]; value is an int for
    varints and fixed-size fields, bytes for length-delimited ones. ValueError if malformed."""
    out, i = [], 0
    while i < len(b):
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        if num == 0:
            raise ValueError("field number 0")
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1 or wt == 5:
            n = 8 if wt == 1 else 4
            if i + n > len(b):
                raise ValueError("truncated fixed field")
            v, i = int.from_bytes(b[i:i + n], "little"), i + n
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated length-delimited field")
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, v))
    return out


def check_spiece(path, t5, tok):
    """A SentencePiece ModelProto: pieces (field 1), trainer_spec (2), normalizer_spec (3), ...
    Returns the number of pieces."""
    if not os.path.isfile(path):
        raise UserError(f"{path}: file not found (the T5 SentencePiece tokenizer model)")
    with open(path, "rb") as f:
        b = f.read()
    if not b:
        raise UserError(f"{path}: empty file, not a SentencePiece model")
    if b[0] != 0x0A:
        raise UserError(f"{path}: not a SentencePiece model (the first byte is 0x{b[0]:02x}, not field 1 "
                        "length-delimited 0x0a)")
    try:
        fields = _fields(b)
        pieces = []
        for num, wt, v in fields:
            if num == 1:
                if wt != 2:
                    raise ValueError("field 1 is not length-delimited")
                p = {n: x for n, w, x in _fields(v)}
                if not isinstance(p.get(1), bytes):
                    raise ValueError(f"piece {len(pieces)} has no string")
                pieces.append((p[1].decode("utf-8"), p.get(3, 1)))  # type 1 NORMAL by default
        if not pieces:
            raise ValueError("no pieces")
        model_type = 1  # UNIGRAM
        for num, wt, v in fields:
            if num == 2 and wt == 2:
                for n, w, x in _fields(v):
                    if n == 3 and w == 0:
                        model_type = x
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a SentencePiece model ({e})")
    if model_type != 1:
        raise UserError(f"{path}: SentencePiece model_type {model_type} is not unigram (1), which T5 uses")
    if len(pieces) > t5["vocab_size"]:
        raise UserError(f"{path}: {len(pieces)} pieces but config.json's vocab_size is {t5['vocab_size']}")
    for k in ("eos_id", "pad_id"):
        if tok[k] >= len(pieces):
            raise UserError(f"{path}: {k} {tok[k]} (config.json) is not a piece of the model "
                            f"({len(pieces)} pieces)")
    return b, len(pieces)


# ----------------------------------------------------------------------------------------------

def convert(args):
    hf = args.hf
    if not os.path.isdir(hf):
        raise UserError(f"{hf}: not a directory (--hf takes a Hugging Face T5 model directory)")
    t5, tok = read_config(hf)
    spm_bytes, n_pieces = check_spiece(os.path.join(hf, "spiece.model"), t5, tok)
    exp = expected_tensors(t5)
    found, seen, what = load_weights(hf, set(exp) | {"encoder.embed_tokens.weight"})
    if "shared.weight" not in found and "encoder.embed_tokens.weight" in found:
        found["shared.weight"] = found.pop("encoder.embed_tokens.weight")
        seen["shared.weight"] = seen["encoder.embed_tokens.weight"]
    found.pop("encoder.embed_tokens.weight", None)
    if "shared.weight" not in found:
        raise UserError(f"{what}: missing tensor shared.weight (nor encoder.embed_tokens.weight; expected "
                        f"shape {shape_str(exp['shared.weight'])} from config.json)")
    validate(found, seen, what, exp)

    dtype = args.dtype
    if dtype is None:
        src = found["encoder.block.0.layer.0.SelfAttention.q.weight"][0].dtype
        if src not in TORCH_TO_NAME:
            raise UserError(f"{found['encoder.block.0.layer.0.SelfAttention.q.weight'][1]}: the matrices are "
                            f"{src}; pass --dtype f32, bf16 or f16")
        dtype = TORCH_TO_NAME[src]
    tdt = DTYPES[dtype][1]

    os.makedirs(args.out, exist_ok=True)
    nbytes = write_safetensors(os.path.join(args.out, "t5.safetensors"),
                               [(k, found[k][0].to(tdt)) for k in exp])
    write_bytes_atomic(os.path.join(args.out, "spiece.model"), spm_bytes)
    nparams = sum(found[k][0].numel() for k in exp)
    config = {"tessera_format": 1, "architecture": "t5_encoder",
              "t5": dict({"file": "t5.safetensors"}, **t5, dtype=dtype),
              "tokenizer": dict({"file": "spiece.model"}, **tok)}
    # written last: a directory is a model only once config.json names its files
    with atomic_write(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"t5 encoder: d_model {t5['d_model']} layers {t5['num_layers']} heads {t5['num_heads']} d_kv {t5['d_kv']} "
          f"d_ff {t5['d_ff']} vocab {t5['vocab_size']}: {len(exp)} tensors, {nparams:,} params, {dtype}, "
          f"{nbytes / 2**20:.1f} MiB -> {os.path.join(args.out, 't5.safetensors')}\n"
          f"tokenizer: {n_pieces} SentencePiece pieces, eos {tok['eos_id']} pad {tok['pad_id']} -> "
          f"{os.path.join(args.out, 'spiece.model')}\n"
          f"config: {os.path.join(args.out, 'config.json')}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a Hugging Face T5 v1.1 / flan-T5 checkpoint to a tessera "
                                             "T5 text encoder directory.")
    ap.add_argument("--hf", required=True, help="Hugging Face model directory (config.json, weights, spiece.model)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", choices=list(DTYPES), help="storage dtype (default: the checkpoint's)")
    args = ap.parse_args(argv)
    return run_converter(convert, args)


if __name__ == "__main__":
    sys.exit(main())
