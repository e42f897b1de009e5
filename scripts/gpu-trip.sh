#!/usr/bin/env bash
# What travels to a lent GPU machine is this checkout's working tree (tracked files and untracked
# ones git does not ignore) plus the carried paths, 64 MiB at most; the tracked tree is ~82 MiB, 39
# of them the emoji target. `pack` takes out the tracked files the GPU check does not read (the
# PyTorch checkpoints the converter tests read, the data-trained draft, the quality classifier,
# the emoji heads (EAGLE, Medusa, Hawk), the README's images) and prints what will travel;
# `unpack` brings them back from git.
# Both are safe to repeat. Usage: scripts/gpu-trip.sh pack|unpack|size
set -euo pipefail
cd "$(dirname "$0")/.."

# Paths scripts/gpu-check.sh can do without: its cuda tests and benches do not read them, and its
# methods table names eagle, medusa and hawk as not run, and turns quality off, when the emoji
# heads and the classifier stayed here (with them the trip would be ~71 MiB).
PATHS=(tests/fixtures/llamagen/pt tests/fixtures/mar/pt models/emoji/draft-data
       models/emoji/classifier models/emoji/eagle models/emoji/medusa models/emoji/hawk docs/images)
LIMIT=$((64 * 1048576))

travelling_bytes() {
  # Tracked files present on disk and untracked ones not ignored (links count as links).
  { git ls-files -z; git ls-files -z --others --exclude-standard; } |
    python3 -c 'import os, sys
names = [n for n in sys.stdin.buffer.read().split(b"\0") if n]
print(sum(os.lstat(n).st_size for n in names if os.path.lexists(n)))'
}
size() {
  local deps=0
  [[ -d .gpu-deps ]] && deps=$(du -sb .gpu-deps | cut -f1)
  local tree
  tree=$(travelling_bytes)
  local total=$((tree + deps))
  printf 'travels: %.1f MiB (tree %.1f MiB + .gpu-deps %.1f MiB) of the 64 MiB limit\n' \
    "$(echo "$total / 1048576" | bc -l)" "$(echo "$tree / 1048576" | bc -l)" \
    "$(echo "$deps / 1048576" | bc -l)"
  if ((total > LIMIT)); then
    echo "gpu-trip.sh: over the limit: run 'scripts/gpu-trip.sh pack' first" >&2
    return 1
  fi
}

case ${1:-} in
  pack)
    if [[ -n $(git status --porcelain -- "${PATHS[@]}") ]]; then
      echo "gpu-trip.sh: local changes under ${PATHS[*]}: commit or stash them first" >&2
      exit 1
    fi
    rm -rf -- "${PATHS[@]}"
    echo "gpu-trip.sh: took out ${PATHS[*]} (scripts/gpu-trip.sh unpack brings them back)"
    size
    ;;
  unpack)
    git checkout HEAD -- "${PATHS[@]}"
    echo "gpu-trip.sh: restored ${PATHS[*]}"
    ;;
  size) size ;;
  *)
    echo "usage: scripts/gpu-trip.sh pack|unpack|size" >&2
    exit 2
    ;;
esac
