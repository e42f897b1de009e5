#!/usr/bin/env bash
# Installs tessera's build and test dependencies from Debian 12 packages, and the PyPI packages of
# python/tessera_eval (FID and CLIP score; no Debian package exists) into a venv beside them.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libopenblas-dev libomp-dev nlohmann-json3-dev
      libcli11-dev libpng-dev libjpeg62-turbo-dev libwebp-dev zlib1g-dev libgtest-dev libgmock-dev
      libeigen3-dev libfreetype-dev libcpp-httplib-dev libsentencepiece-dev libicu-dev chromium chromium-driver fonts-dejavu-core python3-torch python3-numpy python3-pil python3-scipy python3-venv
      python3-dev
      clang libclang-rt-dev)  # clang and its libFuzzer runtime: tests/fuzz; chromium: the
                              # browser test of tessera serve's page (python/test_serve_browser.py);
                              # python3-dev: the Python package's module (pip install .)
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

# make_venv VENV REQUIREMENTS [VENV_FLAGS...] [-- PIP_FLAGS...]: a venv holding REQUIREMENTS,
# made again from scratch (--clear) when they changed since it was made (its stamp), so that it
# holds what they say and nothing older.
make_venv() {
  local venv="$1" reqs="$2" stamp="$1/.tessera-requirements"
  shift 2
  local venv_flags=() pip_flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do venv_flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  pip_flags=("$@")
  cmp -s "$reqs" "$stamp" 2>/dev/null && return 0
  local SUDO=""
  [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$venv")" ] && SUDO="sudo"
  $SUDO /usr/bin/python3 -m venv --clear "${venv_flags[@]}" "$venv"
  $SUDO "$venv/bin/pip" install -q --disable-pip-version-check "${pip_flags[@]}" -r "$reqs"
  $SUDO cp "$reqs" "$stamp"
}

# python/tessera_eval: torchmetrics and transformers from PyPI in a venv that sees Debian's torch,
# numpy and scipy (--system-site-packages). The constraints pin torch and numpy to Debian's
# versions, so pip fails rather than download a second torch. ctest's python_tessera_eval runs
# this venv's python (CMake cache TESSERA_EVAL_PYTHON).
here="$(dirname "$0")/.."
constraints="$(mktemp)"
/usr/bin/python3 -c 'import numpy, torch; v = lambda m: m.__version__.split("+")[0]
print(f"torch=={v(torch)}\nnumpy=={v(numpy)}")' > "$constraints"
make_venv "${TESSERA_EVAL_VENV:-/opt/tessera-eval-venv}" "$here/python/tessera_eval/requirements.txt" \
  --system-site-packages -- -c "$constraints"
rm -f "$constraints"

# The Python tests' own PyPI packages (selenium, for the browser test of tessera serve's page) in
# a venv of their own, without the system's packages: selenium's urllib3 must not reach Debian's
# requests in the venv above. ctest's python_serve_browser runs this venv's python (CMake cache
# TESSERA_TEST_PYTHON).
make_venv "${TESSERA_TEST_VENV:-/opt/tessera-test-venv}" "$here/python/test_requirements.txt"
