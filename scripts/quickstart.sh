#!/usr/bin/env bash
# Sets up tessera on a fresh Debian 12 machine and runs the main job: convert a checkpoint in
# LlamaGen's official layout (the project's tiny test checkpoint) and generate images from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build
mkdir -p out
/usr/bin/python3 tools/convert_llamagen.py \
  --gpt tests/fixtures/llamagen/pt/c2i_gpt.pt --vq tests/fixtures/llamagen/pt/vq.pt \
  --gpt-model custom --dim 64 --n-layer 2 --n-head 4 --vocab-size 256 --num-classes 10 \
  --image-size 16 --downsample 4 --out out/tiny-c2i
./build/tessera generate -m out/tiny-c2i --class 3 --n 8 --seed 0 --grid -o out/tiny-c2i.png
