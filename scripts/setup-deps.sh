#!/usr/bin/env bash
# Installs tessera's build and test dependencies from Debian 12 packages.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libopenblas-dev libomp-dev nlohmann-json3-dev
      libcli11-dev libpng-dev libjpeg62-turbo-dev libwebp-dev zlib1g-dev libgtest-dev libgmock-dev
      libeigen3-dev python3-torch python3-numpy python3-pil
      clang libclang-rt-dev)  # clang and its libFuzzer runtime: tests/fuzz
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
