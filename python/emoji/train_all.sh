#!/usr/bin/env bash
# The emoji model family, end to end (models/emoji/MODEL_CARD.md records the run this made).
# CPU-only by default: Debian's python3-torch, 2 threads. Usage:
#   bash python/emoji/train_all.sh NPM_DIR DATA_DIR RUNS_DIR
set -euo pipefail
NPM=${1:?npm dir}; DATA=${2:?data dir}; RUNS=${3:?runs dir}
cd "$(dirname "$0")"
PY=/usr/bin/python3
mkdir -p "$RUNS"
# Food & Drink + Animals & Nature only (290 emoji, 870 classes): with one drawing per class the GPT
# must memorise, and on 2 CPU cores it reaches enough epochs only on a subset (MODEL_CARD.md).
[ -f "$DATA/meta.json" ] || $PY build_dataset.py --npm "$NPM" --out "$DATA" --categories "Food & Drink,Animals & Nature"
[ -f "$RUNS/vq.pt" ] || $PY train_vq.py --data "$DATA" --out "$RUNS" --steps 2200 --full-steps 150
[ -f "$RUNS/tokens.npy" ] || $PY encode_dataset.py --data "$DATA" --vq "$RUNS/vq.pt" --out "$RUNS/tokens.npy"
[ -f "$RUNS/classifier.safetensors" ] || $PY train_classifier.py --data "$DATA" --vq "$RUNS/vq.pt" \
  --tokens "$RUNS/tokens.npy" --out "$RUNS" --steps 1500
# f32: PyTorch 1.13 emulates bf16 autocast on CPUs without native bf16, several times slower.
$PY train_gpt.py --data "$DATA" --tokens "$RUNS/tokens.npy" --out "$RUNS" --name draft \
  --dim 192 --n-layer 4 --n-head 6 --lr 2e-3 --total-steps 600 --precision f32
# The target in two phases, as the shipped run was made: a cosine schedule of 1000 steps, then a
# warm restart that resumes at step 1000 (lr 3.6e-4) and follows a cosine to 0 at step 1700.
# Each command resumes from "$RUNS/target.pt"; once past its last step it only re-saves it.
for total in 1000 1700; do
  $PY train_gpt.py --data "$DATA" --tokens "$RUNS/tokens.npy" --out "$RUNS" --name target \
    --dim 384 --n-layer 11 --n-head 6 --lr 1e-3 --input-noise 0.05 --total-steps $total --precision f32
done
