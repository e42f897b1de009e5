#!/usr/bin/env bash
# Sets up tessera on a fresh Debian 12 machine and runs the main job: an emoji from the embedded
# default model (models/emoji), written to out/red_apple_twitter.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build
mkdir -p out
cd out
../build/tessera generate "red apple"
echo "quickstart: the image is out/red_apple_twitter.png"
