#!/usr/bin/env bash
# The performance figures of docs/performance.md: GPT-B (random weights, official shapes), one
# image with CFG (2 rows per step), 256 tokens, f32 and bf16 weights, against the project's PyTorch
# reference timed in the same run, then bf16 against f32 in paired rounds. Usage: bash scripts/bench-gpt-b.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench}
mkdir -p "$out"
for dt in f32 bf16; do
  [ -f "$out/gpt-b-$dt/config.json" ] ||
    /usr/bin/python3 python/make_random_model.py --gpt-model GPT-B --dtype "$dt" --out "$out/gpt-b-$dt" >/dev/null
done
for dt in f32 bf16; do
  ./build/tessera bench -q -m "$out/gpt-b-$dt" --tokens 256 --torch
  echo
done
# bf16 against f32 in paired rounds (order alternating), the ratio the foundation issue asks for.
./build/tessera bench -q -m "$out/gpt-b-bf16" --against "$out/gpt-b-f32" --tokens 256 --repeat 5
