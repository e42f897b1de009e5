#!/usr/bin/env bash
# The Python package's tests (issue 46): `pip install .` into the test venv (scripts/setup-deps.sh
# makes it), as a user installs it, then pytest on python/test_package.py (the package against
# the `tessera` command installed with it) and python/test_serve_ray.py (Ray Serve, 2 replicas).
# The wheel's build directory (build-wheel/) is kept, so a second run recompiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TESSERA_TEST_VENV:-/opt/tessera-test-venv}"
if [[ ! -x $venv/bin/pytest ]]; then
  echo "test-python.sh: $venv has no pytest: run bash scripts/setup-deps.sh first" >&2
  exit 1
fi
SUDO=""
[[ $(id -u) -ne 0 && ! -w $venv ]] && SUDO="sudo"  # setup-deps.sh made it with sudo
$SUDO "$venv/bin/pip" install -q --disable-pip-version-check .
# --draft-len auto's cost calibrations in the build tree, not the user's cache (as ctest's).
export XDG_CACHE_HOME="${TESSERA_TEST_CACHE:-$PWD/build-wheel/test-cache}"
# Not from the source tree: the installed package, with its compiled module.
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/test_package.py python/test_serve_ray.py
