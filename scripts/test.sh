#!/usr/bin/env bash
# Builds tessera and runs every test (GoogleTest suite + the PyTorch reference checks).
set -euo pipefail
cd "$(dirname "$0")/.."
# With nvcc at hand (and TESSERA_CUDA not set to 0), CI compiles and links the CUDA backend too,
# for one architecture to save time, and runs every CPU test in that build.
cuda_flags=()
if [[ "${TESSERA_CUDA:-1}" != 0 ]] && { [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null; }; then
  cuda_nvcc=/usr/local/cuda/bin/nvcc
  [[ -x $cuda_nvcc ]] || cuda_nvcc=$(command -v nvcc)
  cuda_flags=(-DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$cuda_nvcc")
  echo "test.sh: nvcc found ($cuda_nvcc): building the CUDA backend (sm_90); TESSERA_CUDA=0 skips it"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}"
ninja -C build
# The JUnit report (build/ctest-junit.xml) lets CI list the tests that were skipped
# (tests/check_skips.py).
ctest --test-dir build --output-on-failure -j2 --output-junit ctest-junit.xml
# The Python package, installed with pip and tested with pytest (TESSERA_PYTHON=0 skips it).
if [[ "${TESSERA_PYTHON:-1}" != 0 ]]; then
  bash scripts/test-python.sh
fi
