#!/usr/bin/env bash
# Installs a build to a scratch prefix and uses it as a user would (issue 39): the installed
# `tessera` finds its default model (and the draft it names) under PREFIX/share, and the example
# program (examples/generate_one.cpp) builds against the installed library with CMake
# (find_package(tessera)) and with pkg-config, and samples with the model's own settings: its
# tokens equal the installed command's.
# Usage: bash scripts/check-install.sh [BUILD_DIR]   (default: build, already built)
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/tessera include/tessera/tessera.h lib/cmake/tessera/tesseraConfig.cmake \
         lib/pkgconfig/tessera.pc share/tessera/models/emoji/target/config.json \
         share/tessera/models/emoji/draft/config.json; do
  [ -e "$prefix/$f" ] || { echo "error: $f was not installed" >&2; exit 1; }
done
ls "$prefix"/lib/libtessera.* >/dev/null

# The installed command, run away from the source tree.
cd "$work"
"$prefix/bin/tessera" --version
"$prefix/bin/tessera" generate --class 504 -s 3 -t 1 -q --tokens-out cli.npy
"$prefix/bin/tessera" generate --class 504 -s 3 -t 1 --method sd --draft-len 3 \
  --tokens-out sd.npy 2>sd.log
grep -q "drafter=model (named in $prefix/share/tessera/models/emoji/target/config.json)" sd.log \
  || { echo "error: the installed default model did not use its draft:" >&2; cat sd.log >&2; exit 1; }

# The example with CMake's package.
src="$OLDPWD"
cmake -S "$src/examples" -B examples-cmake -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build examples-cmake >/dev/null
model="$prefix/share/tessera/models/emoji/target"
./examples-cmake/generate_one "$model" 504 3 cmake.png cmake.npy
cmp cli.npy cmake.npy

# The example with pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
static=$(ls "$prefix"/lib/libtessera.so >/dev/null 2>&1 || echo --static)
# shellcheck disable=SC2046
c++ -std=c++20 -O1 "$src/examples/generate_one.cpp" -o generate_one_pc \
  $(pkg-config --cflags --libs $static tessera)
LD_LIBRARY_PATH="$prefix/lib" ./generate_one_pc "$model" 504 3 pc.png pc.npy
cmp cli.npy pc.npy
echo "install check OK: $prefix (command, CMake package, pkg-config)"
