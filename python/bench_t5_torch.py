#!/opt/tessera-eval-venv/bin/python3
"""Times transformers' T5EncoderModel on a tessera T5 directory's weights (f32 compute) on CPU.

  /opt/tessera-eval-venv/bin/python3 python/bench_t5_torch.py --model tests/fixtures/t5/f32 \
      --ids 37,9,1 --threads 2 --repeat 5

`tessera bench -m T5_DIR --torch` runs this with the ids it encodes. The T5Config comes from the
directory's config.json (gated-gelu, as tools/convert_t5.py accepts only T5 v1.1 / flan-T5), the
weights from t5.safetensors (the names are transformers'; encoder.embed_tokens.weight is tied to
shared.weight), upcast to f32 from the stored dtype. One untimed warm-up, then --repeat timed
forwards of one sequence without an attention mask (every id is a real token). Prints one JSON line.
Needs transformers (scripts/setup-deps.sh installs it in /opt/tessera-eval-venv).
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Before torch loads libgomp: Debian's torch runs its matrix multiplies in OpenBLAS's own pthreads,
# which libgomp's workers, spinning after each OpenMP region by default, keep off the cores: on the
# 2-core machine the T5-XL encode took 7.6 s with 2 threads spinning, 4.0 s passive (4.5 s on 1
# thread). The baseline is transformers at its best; OMP_WAIT_POLICY set by the caller is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tessera_ref.safetensors_io import read_header  # noqa: E402


def load_model(model_dir):
    import transformers
    from transformers.modeling_utils import no_init_weights

    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    if c.get("architecture") != "t5_encoder":
        sys.exit(f"{model_dir}: config.json's architecture is {c.get('architecture')!r}, not \"t5_encoder\"")
    t5, tok = c["t5"], c.get("tokenizer", {})
    config = transformers.T5Config(
        vocab_size=t5["vocab_size"], d_model=t5["d_model"], d_kv=t5["d_kv"], d_ff=t5["d_ff"],
        num_layers=t5["num_layers"], num_heads=t5["num_heads"],
        relative_attention_num_buckets=t5["relative_attention_num_buckets"],
        relative_attention_max_distance=t5["relative_attention_max_distance"],
        layer_norm_epsilon=t5["layer_norm_epsilon"], feed_forward_proj="gated-gelu",
        dropout_rate=0.0, is_encoder_decoder=False, use_cache=False,
        eos_token_id=tok.get("eos_id", 1), pad_token_id=tok.get("pad_id", 0))
    with no_init_weights():  # the weights are overwritten from the file: skip the random init
        m = transformers.T5EncoderModel(config)
    m = m.float().eval()
    params = dict(m.named_parameters())
    path = os.path.join(model_dir, t5.get("file", "t5.safetensors"))
    n, hdr = read_header(path)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # read, never written
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    loaded = set()
    with torch.no_grad():
        for name, info in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            if name not in params:
                sys.exit(f"{path}: tensor {name} is not a parameter of transformers' T5EncoderModel")
            b, e = info["data_offsets"]
            raw = np.asarray(data[b:e])
            if info["dtype"] == "BF16":
                t = torch.from_numpy(raw.view("<i2").copy()).view(torch.bfloat16)
            elif info["dtype"] == "F16":
                t = torch.from_numpy(raw.view("<f2").copy())
            elif info["dtype"] == "F32":
                t = torch.from_numpy(raw.view("<f4"))
            else:
                sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}")
            p = params[name]
            if list(p.shape) != info["shape"]:
                sys.exit(f"{path}: {name} has shape {info['shape']}, transformers expects {list(p.shape)}")
            p.copy_(t.reshape(p.shape).float())  # f32 compute whatever the stored dtype
            loaded.add(name)
    # encoder.embed_tokens.weight is shared.weight (tied): one tensor in the file.
    missing = [k for k in params if k not in loaded and k != "encoder.embed_tokens.weight"]
    if missing:
        sys.exit(f"{path}: missing tensors {missing[:3]}")
    if m.encoder.embed_tokens.weight.data_ptr() != m.shared.weight.data_ptr():
        m.encoder.embed_tokens.weight = m.shared.weight
    return m, transformers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="tessera T5 directory (config.json, t5.safetensors)")
    ap.add_argument("--ids", required=True, help="comma-separated token ids of one sequence (EOS included)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch default)")
    ap.add_argument("--repeat", type=int, default=5, help="timed forwards after one warm-up")
    a = ap.parse_args()
    if a.repeat < 1:
        sys.exit(f"--repeat must be >= 1, got {a.repeat}")
    try:
        ids = [int(x) for x in a.ids.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"--ids {a.ids!r}: give comma-separated integers")
    if not ids:
        sys.exit("--ids is empty")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    m, tf_version = load_model(a.model)
    load_s = time.perf_counter() - t0
    x = torch.tensor([ids], dtype=torch.long)
    times = []
    with torch.inference_mode():
        m(input_ids=x)  # warm-up
        for _ in range(a.repeat):
            t = time.perf_counter()
            out = m(input_ids=x).last_hidden_state
            times.append(1e3 * (time.perf_counter() - t))
    if not torch.isfinite(out).all():
        sys.exit("transformers' hidden states are not finite")
    ms = statistics.median(times)
    print(json.dumps({"impl": "transformers", "ms": round(ms, 3), "ms_rounds": [round(t, 3) for t in times],
                      "tokens": len(ids), "tokens_per_s": round(len(ids) / (ms * 1e-3), 3),
                      "load_s": round(load_s, 3), "threads": torch.get_num_threads(),
                      "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "model": a.model,
                      "transformers": tf_version, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
