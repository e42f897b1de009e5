#!/usr/bin/env bash
# Installs tessera's build and test dependencies from Debian 12 packages, and the PyPI packages of
# python/tessera_eval (FID and CLIP score; no Debian package exists) into a venv beside them.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libopenblas-dev libomp-dev nlohmann-json3-dev
      libcli11-dev libpng-dev libjpeg62-turbo-dev libwebp-dev zlib1g-dev libgtest-dev libgmock-dev
      libeigen3-dev libfreetype-dev libcpp-httplib-dev chromium chromium-driver fonts-dejavu-core python3-torch python3-numpy python3-pil python3-scipy python3-venv
      clang libclang-rt-dev)  # clang and its libFuzzer runtime: tests/fuzz; chromium: the
                              # browser test of tessera serve's page (python/test_serve_browser.py)
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

# python/tessera_eval: torchmetrics and transformers from PyPI in a venv that sees Debian's torch,
# numpy and scipy (--system-site-packages). The constraints pin torch and numpy to Debian's
# versions, so pip fails rather than download a second torch. ctest's python_tessera_eval runs
# this venv's python (CMake cache TESSERA_EVAL_PYTHON). A venv whose requirements changed is made
# again from scratch (--clear), so that it holds what they say and nothing older.
venv="${TESSERA_EVAL_VENV:-/opt/tessera-eval-venv}"
reqs="$(dirname "$0")/../python/tessera_eval/requirements.txt"
stamp="$venv/.tessera-requirements"
if ! cmp -s "$reqs" "$stamp" 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$venv")" ] && SUDO="sudo"
  $SUDO /usr/bin/python3 -m venv --clear --system-site-packages "$venv"
  constraints="$(mktemp)"
  /usr/bin/python3 -c 'import numpy, torch; v = lambda m: m.__version__.split("+")[0]
print(f"torch=={v(torch)}\nnumpy=={v(numpy)}")' > "$constraints"
  $SUDO "$venv/bin/pip" install -q --disable-pip-version-check -c "$constraints" -r "$reqs"
  rm -f "$constraints"
  $SUDO cp "$reqs" "$stamp"
fi

# The Python tests' own PyPI packages (selenium, for the browser test of tessera serve's page) in
# a venv of their own, without the system's packages: selenium's urllib3 must not reach Debian's
# requests in the venv above. ctest's python_serve_browser runs this venv's python (CMake cache
# TESSERA_TEST_PYTHON).
test_venv="${TESSERA_TEST_VENV:-/opt/tessera-test-venv}"
test_reqs="$(dirname "$0")/../python/test_requirements.txt"
test_stamp="$test_venv/.tessera-requirements"
if ! cmp -s "$test_reqs" "$test_stamp" 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$test_venv")" ] && SUDO="sudo"
  $SUDO /usr/bin/python3 -m venv --clear "$test_venv"
  $SUDO "$test_venv/bin/pip" install -q --disable-pip-version-check -r "$test_reqs"
  $SUDO cp "$test_reqs" "$test_stamp"
fi
