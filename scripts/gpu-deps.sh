#!/usr/bin/env bash
# Fetches, on the development machine (Debian 12), the -dev packages tessera's CMake needs that the
# GPU machine's image (Ubuntu 24.04, no package registry) lacks, into .gpu-deps/ (git-ignored
# through .git/info/exclude) so that a device call can carry them. scripts/gpu-check.sh unpacks
# them there with dpkg -x into /tmp/deps, never into /.
#   scripts/gpu-deps.sh            # download (needs apt-get and the network)
#   scripts/gpu-deps.sh --list     # print what it would download
# Debian 12's packages need glibc <= 2.34 and nothing newer than gcc 12's libstdc++; Ubuntu 24.04
# has glibc 2.39 and gcc 13's libstdc++, so they load there.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
DIR=.gpu-deps
# What the GPU machine lacks (../shared/notes/gpu_machine.md): libwebp entirely; headers for
# libjpeg and FreeType; pkg-config; OpenBLAS's cblas.h (its shared library is there).
PKGS=(libwebp-dev libwebp7 libwebpmux3 libwebpdemux2
      libjpeg62-turbo-dev libjpeg62-turbo
      libfreetype-dev libfreetype6 libbrotli1
      pkgconf pkgconf-bin libpkgconf3)
# libopenblas-pthread-dev is 5 MB (a static library we do not link): keep only its headers.
BLAS_DEV=libopenblas-pthread-dev

if [[ ${1:-} == --list ]]; then printf '%s\n' "${PKGS[@]}" "$BLAS_DEV (headers only)"; exit 0; fi
[[ $# -eq 0 ]] || { echo "gpu-deps.sh: unknown argument '$1' (use --list or nothing)" >&2; exit 2; }
command -v apt-get >/dev/null || { echo "gpu-deps.sh: apt-get not found (run on the Debian dev machine)" >&2; exit 1; }

EXCLUDE=$(git rev-parse --git-path info/exclude)  # a worktree shares its main checkout's
mkdir -p "$(dirname "$EXCLUDE")" && { grep -qxF "/$DIR/" "$EXCLUDE" 2>/dev/null || echo "/$DIR/" >> "$EXCLUDE"; }
rm -rf "$DIR" && mkdir -p "$DIR/blas"
(cd "$DIR" && apt-get download "${PKGS[@]}" "$BLAS_DEV" >/dev/null)
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
dpkg -x "$DIR"/${BLAS_DEV}_*.deb "$tmp"
cp "$tmp"/usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$DIR/blas/"
rm "$DIR"/${BLAS_DEV}_*.deb
# An epoch's ':' arrives as '%3a', a character a device call's carry may refuse.
for f in "$DIR"/*%3a*.deb; do [[ -e $f ]] && mv "$f" "${f//%3a/_}"; done
n=$(ls "$DIR"/*.deb | wc -l)
[[ $n -eq ${#PKGS[@]} ]] || { echo "gpu-deps.sh: expected ${#PKGS[@]} .deb files, got $n" >&2; exit 1; }
echo "gpu-deps.sh: $n packages and $(ls "$DIR/blas" | wc -l) BLAS headers in $DIR/ ($(du -sb "$DIR" | cut -f1) bytes)"
