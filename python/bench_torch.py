#!/usr/bin/python3
"""Times the PyTorch reference (static KV cache, like LlamaGen's generate) on CPU or a GPU.

  /usr/bin/python3 python/bench_torch.py -m tests/fixtures/llamagen/c2i_f32 --tokens 14
  /usr/bin/python3 python/bench_torch.py --gpt-model GPT-B --tokens 32 --dtype bf16 --threads 8

  python3 python/bench_torch.py --gpt-model GPT-XL --dtype bf16 --device cuda --batch 8 --compile

--batch images with CFG (2 rows: cond + uncond). Untimed warm-up: the prefill and one decode step.
Then K decode steps (forward of both rows, CFG, temperature/top-k sampling) are timed.
Prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from tessera_ref.llamagen import GPT_CONFIGS, _cfg, load_tessera_gpt, random_gpt, sample  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("-m", "--model", help="tessera model directory")
    src.add_argument("--gpt-model", choices=list(GPT_CONFIGS), help="named size with random weights")
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--downsample", type=int, default=16)
    ap.add_argument("--model-type", default="c2i", choices=["c2i", "t2i"])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch default)")
    ap.add_argument("--cfg", type=float, default=4.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--batch", type=int, default=1, help="images decoded together")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile(mode='reduce-overhead') the decode step (CUDA graphs on a GPU)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed decode steps (compilation happens here)")
    a = ap.parse_args()
    if a.batch < 1:
        sys.exit(f"--batch must be >= 1, got {a.batch}")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"--device {a.device}: torch {torch.__version__} sees no CUDA device")
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"--compile: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)")
    dev = torch.device(a.device)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    m = load_tessera_gpt(a.model) if a.model else random_gpt(a.gpt_model, a.image_size, a.downsample, a.model_type)
    m = m.eval().to(dev)
    if a.dtype == "bf16":
        m = m.to(torch.bfloat16)
    T, N = m.cls_token_num, m.block_size
    K, B, W = a.tokens, a.batch, max(a.warmup, 1)
    if K + W + 1 > N:
        sys.exit(f"--tokens {K} too large: at most {N - W - 1} for a {N}-token image ({W} used for warm-up)")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    dtype = m.tok_embeddings.weight.dtype
    with torch.inference_mode():
        m.setup_caches(2 * B, T + N, dtype)
        # Rows: B conditional then B unconditional (the halves _cfg splits).
        if m.model_type == "c2i":
            cond = torch.tensor([1] * B + [m.num_classes] * B, device=dev)
        else:
            cap = torch.randn(B, T, m.config.caption_dim, device=dev).to(dtype)
            unc = m.cls_embedding.uncond_embedding.to(dtype).unsqueeze(0).expand(B, -1, -1)
            cond = torch.cat([cap, unc])
        skw = dict(temperature=1.0, top_k=a.top_k, top_p=1.0, sample_logits=True)
        logits = _cfg(m(None, cond, torch.arange(0, T, device=dev)), a.cfg)
        tok, _ = sample(logits, **skw)
        pos = torch.tensor([T], device=dev)

        def step(tok, pos):
            x = tok.view(-1, 1)
            lg = _cfg(m(torch.cat([x, x]), None, pos), a.cfg)
            return sample(lg, **skw)[0]

        if a.compile:
            graphed = torch.compile(step, mode="reduce-overhead", fullgraph=False)

            def step(tok, pos):
                # A CUDA-graph replay reuses its output buffers: mark each step and keep a copy of
                # the token (as the official generate() does with next_token.clone()).
                torch.compiler.cudagraph_mark_step_begin()
                return graphed(tok, pos).clone()
        tc = time.perf_counter()
        for _ in range(W):  # warm-up decode steps (and compilation)
            tok = step(tok, pos)
            pos = pos + 1
        sync()
        compile_s = time.perf_counter() - tc
        t0 = time.perf_counter()
        for _ in range(K):
            tok = step(tok, pos)
            pos = pos + 1
        sync()  # the GPU runs behind the host: time to the last step's end
        dt = time.perf_counter() - t0
    weight_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    print(json.dumps({"impl": "pytorch-compile" if a.compile else "pytorch", "tokens": K,
                      "seconds": round(dt, 6), "tokens_per_s": round(B * K / dt, 3),
                      "ms_per_token": round(1000 * dt / K, 3), "ms_per_step": round(1000 * dt / K, 3),
                      "batch": B, "device": a.device, "weight_bytes": weight_bytes,
                      "warmup_s": round(compile_s, 3),
                      "model": a.model or a.gpt_model, "dtype": a.dtype, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
