#!/usr/bin/env bash
# Builds tessera and runs every test (GoogleTest suite + the PyTorch reference checks).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build
# The JUnit report (build/ctest-junit.xml) lets CI list the tests that were skipped
# (tests/check_skips.py).
ctest --test-dir build --output-on-failure -j2 --output-junit ctest-junit.xml
