#!/usr/bin/env bash
# One unattended check of the CUDA backend on a fresh GPU machine (issue 40): unpack the carried
# -dev packages, build -DTESSERA_CUDA=ON, run the `cuda` tests, then time tessera on the GPU
# against the PyTorch reference (eager and torch.compile) and print one markdown table (with a
# round's cost at fixed acceptance on GPT-XL with a GPT-B draft, issue 42's 1.3x target); then
# every speculative method against vanilla on the GPU in one `tessera bench --methods` run, with
# quality and each round's cost by phase (issue 42), as a second table.
#
# The device call (a session holding a GPU; first, here: scripts/gpu-deps.sh, then
# scripts/gpu-trip.sh pack to fit the 64 MiB that travels, and scripts/gpu-trip.sh unpack after):
#   run(command="bash scripts/gpu-check.sh --report $OUT/gpu-check.md", carry=[".gpu-deps"],
#       timeout_s=600)
#   quick subset (~4 min): command="bash scripts/gpu-check.sh --quick --report $OUT/gpu-check.md"
#
# Options: --report FILE (table and logs as markdown), --quick, --no-torch (tessera's rows only:
# a rerun after the reference was measured on the same card), --budget SECONDS (default 450:
# rows that would start past it are skipped and named), --dry-run (print the commands only),
# --build-dir DIR (default build-cuda), --all-targets (build every test, not only the CLI and the
# backend tests). CUDA_ARCH (default 90) overrides the architectures; GPU_CHECK_METHODS (default
# sd,sjd,gsd,lantern,cool-sd,eagle,medusa,hawk) the methods of the second table, GPU_CHECK_TREES
# (default "sd,eagle@dynamic lantern,eagle@kary:2,2,1") its tree rows, LIST@TREE each.
# Exit status: non-zero when the build, a test or any timed run failed; each failure is named in
# the table in place of its number.
set -uo pipefail
cd "$(dirname "$0")/.."

REPORT="" QUICK=0 DRY=0 TORCH=1 BUDGET=450 BUILD=build-cuda TARGETS=(--target tessera tessera_backend_tests)
while [[ $# -gt 0 ]]; do
  case $1 in
    --report) REPORT=${2:?--report needs a file}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --no-torch) TORCH=0; shift ;;
    --all-targets) TARGETS=(); shift ;;
    --dry-run) DRY=1; shift ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --build-dir) BUILD=${2:?--build-dir needs a directory}; shift 2 ;;
    *) echo "gpu-check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "gpu-check.sh: --budget must be whole seconds, got '$BUDGET'" >&2; exit 2; }
ARCH=${CUDA_ARCH:-90}
PY=${PYTHON:-python3}
READ_GBS=3107  # H100 read bandwidth measured 2026-11-26; re-measured below on the card at hand
WORK=/tmp/gpu-check LOG=/tmp/gpu-check/log.txt
mkdir -p "$WORK" && : >"$LOG"
START=$SECONDS FAILED=0
ROWS=()   # markdown table rows, printed once at the end

left() { echo $((BUDGET - (SECONDS - START))); }
row() { ROWS+=("| $* |"); }
fail() { FAILED=1; echo "FAILED: $*" | tee -a "$LOG" >&2; }
# Runs a command, its output to the log; in --dry-run, prints it instead.
run() {
  if [[ $DRY == 1 ]]; then echo "+ $*"; return 0; fi
  echo "+ $*" >>"$LOG"
  local t=$(left); [[ $t -gt 5 ]] || { echo "budget spent before: $*" >>"$LOG"; return 124; }
  timeout "$t" "$@" >"$LOG.cur" 2>&1; local rc=$?
  cat "$LOG.cur" >>"$LOG"; return $rc
}
# One field of the last JSON object in the last run's output (one line, or indented over many as
# tessera bench --json prints it).
field() {
  $PY - "$LOG.cur" "$1" 2>/dev/null <<'PYEOF'
import json, re, sys
text, path = open(sys.argv[1]).read(), sys.argv[2]
for m in reversed(list(re.finditer(r"^\{", text, re.M))):
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[m.start():])
    except ValueError:
        continue
    for key in re.findall(r'\["([^"]+)"\]', path):
        obj = obj[key]
    print(obj)
    break
PYEOF
}

# 1. Dependencies carried as .deb files (scripts/gpu-deps.sh), unpacked under /tmp/deps.
CMAKE_EXTRA=()
if [[ -d .gpu-deps ]]; then
  D=/tmp/deps/usr A=x86_64-linux-gnu
  if [[ $DRY == 0 ]]; then
    for f in .gpu-deps/*.deb; do dpkg -x "$f" /tmp/deps; done
    mkdir -p $D/include/openblas && cp .gpu-deps/blas/*.h $D/include/openblas/
    # .pc files say prefix=/usr: point them at the unpacked tree.
    sed -i "s|^prefix=/usr\$|prefix=$D|" $D/lib/$A/pkgconfig/*.pc
  else echo "+ dpkg -x .gpu-deps/*.deb /tmp/deps (and the BLAS headers)"; fi
  export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib/$A${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$D/lib/$A/pkgconfig CMAKE_PREFIX_PATH=$D
  CMAKE_EXTRA+=(-DPKG_CONFIG_EXECUTABLE=$D/bin/pkgconf -DCBLAS_INCLUDE_DIR=$D/include/openblas
                -DJPEG_INCLUDE_DIR=$D/include -DJPEG_LIBRARY=$D/lib/$A/libjpeg.so)
  # The image has OpenBLAS's shared library but no libopenblas.so link to build against.
  blas=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*libopenblas[^ ]*\.so[.0-9]*$' | head -1)
  [[ -n $blas ]] && CMAKE_EXTRA+=(-DOPENBLAS_LIBRARY=$blas)
fi

# 2. Build (all cores; the CLI and the backend tests only, unless --all-targets) and the `cuda` tests.
# No HTTP server: the image has neither cpp-httplib nor OpenSSL's headers, and serving is not
# what this checks (tests/check_gpu_deps.py holds the configuration to what the image has).
if run cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DTESSERA_SERVE=OFF -DTESSERA_TEXT=OFF \
     -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${CMAKE_EXTRA[@]}" &&
   run cmake --build "$BUILD" -j "$(nproc)" "${TARGETS[@]}"; then
  row "build (sm_$ARCH) | ok in $((SECONDS - START)) s | | | | |"
  BUILT=1
else
  fail "build"; row "build (sm_$ARCH) | **FAILED** (see log) | | | | |"; BUILT=0
fi
if [[ $BUILT == 1 ]]; then
  run ctest --test-dir "$BUILD" -L cuda --output-on-failure -j 4; rc=$?
  if [[ $DRY == 1 ]]; then :
  elif grep -q 'No tests were found' "$LOG.cur"; then fail "no cuda tests"; row "ctest -L cuda | **FAILED: no cuda tests found** | | | | |"
  elif [[ $rc != 0 ]]; then
    fail "cuda tests"; row "ctest -L cuda | **FAILED**: $(grep -E '^[[:space:]]*[0-9]+ - ' "$LOG.cur" | sed 's/ *([^)]*)//' | awk '{print $3}' | head -8 | paste -sd, -) | | | | |"
  else row "ctest -L cuda | $(grep -o '[0-9]* tests passed\|100% tests passed.*' "$LOG.cur" | head -1) | | | | |"; fi
fi
TESSERA=$BUILD/tessera
HAS_DEVICE=0
if [[ $BUILT == 1 && $DRY == 0 ]]; then
  # Into a variable first: under pipefail, `| grep -q` fails when grep's early exit kills the writer.
  help=$("$TESSERA" bench --help 2>&1)
  if grep -q -- '--device' <<<"$help"; then HAS_DEVICE=1
  else fail "tessera bench has no --device flag"; fi
fi
[[ $DRY == 1 ]] && HAS_DEVICE=1

# The card's read bandwidth, the ceiling the GB/s columns are a fraction of: a read-only reduction
# over 4 GiB, median of 10 after 3 warm-ups.
if [[ $DRY == 0 ]] && run $PY -c '
import torch
x = torch.ones(1 << 31, dtype=torch.bfloat16, device="cuda")
e = [torch.cuda.Event(enable_timing=True) for _ in range(26)]
for _ in range(3): x.sum()
for i in range(13): e[2*i].record(); x.sum(); e[2*i+1].record()
torch.cuda.synchronize()
ms = sorted(e[2*i].elapsed_time(e[2*i+1]) for i in range(13))[6]
print("{\"read_gbs\": %.0f}" % (x.numel() * 2 / ms / 1e6))'; then
  g=$(field '["read_gbs"]'); [[ $g =~ ^[0-9]+$ ]] && READ_GBS=$g
fi

# 3. Models: the emoji target as shipped; GPT-B and GPT-XL random, official layout, converted.
declare -A DIR=([emoji]=models/emoji/target [GPT-B]=$WORK/gpt-b [GPT-XL]=$WORK/gpt-xl)
declare -A CFG=([emoji]=1 [GPT-B]=4 [GPT-XL]=4)
for m in GPT-B GPT-XL; do
  [[ -f ${DIR[$m]}/config.json ]] ||
    run $PY python/make_random_model.py --gpt-model $m --dtype bf16 --out "${DIR[$m]}" || fail "make $m"
done

# 4. Tokens/s and bandwidth.
if [[ $QUICK == 1 ]]; then PLAN="emoji:1 GPT-B:1 GPT-XL:1"; EAGER="emoji:1"
else PLAN="emoji:1 GPT-B:1 GPT-XL:1 GPT-B:8 emoji:16 GPT-XL:8 GPT-B:16 emoji:8 GPT-XL:16"
  EAGER="emoji:1 GPT-B:1 GPT-XL:1 GPT-B:8"; fi
TOK=128  # timed decode steps of the PyTorch runs (of 256), after 3 untimed ones
gbs() { awk -v b="$1" -v ms="$2" -v r=$READ_GBS 'BEGIN{ if (ms > 0) { g = b / (ms * 1e6); printf "%.0f (%.0f%%)", g, 100 * g / r } }'; }
timed_row() {
  local item=$1
  m=${item%:*} b=${item#*:} d=${DIR[$m]} c=${CFG[$m]}
  if [[ $(left) -lt 30 && $DRY == 0 ]]; then row "$m cfg $c batch $b | skipped: time budget | | | | |"; return; fi
  t="—" h="—" e="—" k="—" ratio="" tg="" kg=""
  if [[ $DRY == 1 ]]; then
    run "$TESSERA" bench -m "$d" -n "$b" --cfg "$c" --json --device cuda
    run "$TESSERA" bench -m "$d" -n "$b" --cfg "$c" --json --device cuda --device-loop off
    [[ $TORCH == 1 && " $EAGER " == *" $item "* ]] && run $PY python/bench_torch.py -m "$d" --device cuda --dtype bf16 --cfg "$c" --batch "$b" --tokens 32 --warmup 3
    [[ $TORCH == 1 ]] && run $PY python/bench_torch.py -m "$d" --device cuda --dtype bf16 --cfg "$c" --batch "$b" --tokens $TOK --warmup 3 --compile
    return
  fi
  if [[ $HAS_DEVICE == 0 ]]; then t="**FAILED: no --device in tessera bench**"
  elif run "$TESSERA" bench -m "$d" -n "$b" --cfg "$c" --json --device cuda; then
    t=$(field '["tokens_per_s"]'); tg=$(field '["achieved_weight_gbs"]')
    # The device loop's steps should all be graph replays: say so when none was.
    [[ $(field '["replayed_steps"]') == 0 ]] && t="$t (no graph)"
    [[ -n $t ]] && tg="$(printf '%.0f (%.0f%%)' "$tg" "$(awk -v g="$tg" -v r=$READ_GBS 'BEGIN{print 100*g/r}')")" || { t="**FAILED: no JSON**"; fail "tessera $item"; }
  else t="**FAILED** (rc $?)"; fail "tessera $item"; fi
  if [[ $HAS_DEVICE == 1 ]]; then
    if run "$TESSERA" bench -m "$d" -n "$b" --cfg "$c" --json --device cuda --device-loop off; then
      h=$(field '["tokens_per_s"]'); [[ -n $h ]] || h="**FAILED: no JSON**"
    else h="**FAILED** (rc $?)"; fail "tessera host loop $item"; fi
  fi
  if [[ $TORCH == 1 && " $EAGER " == *" $item "* ]]; then
    if run $PY python/bench_torch.py -m "$d" --device cuda --dtype bf16 --cfg "$c" --batch "$b" --tokens 32 --warmup 3; then
      e=$(field '["tokens_per_s"]')
    else e="**FAILED** (rc $?)"; fail "eager $item"; fi
  fi
  if [[ $TORCH == 0 ]]; then k="(--no-torch)"
  elif run $PY python/bench_torch.py -m "$d" --device cuda --dtype bf16 --cfg "$c" --batch "$b" --tokens $TOK --warmup 3 --compile; then
    k=$(field '["tokens_per_s"]'); kg=$(gbs "$(field '["weight_bytes"]')" "$(field '["ms_per_step"]')")
  else k="**FAILED** (rc $?)"; fail "torch.compile $item"; fi
  [[ ${t%% *} =~ ^[0-9.]+$ && $k =~ ^[0-9.]+$ ]] && ratio=$(awk -v a="${t%% *}" -v b="$k" 'BEGIN{printf "%.2fx", a/b}')
  row "$m cfg $c batch $b | $t | $h | $e | $k | $ratio | $tg / $kg"
}

# 5. Verification cost on GPT-XL: a forward of k positions against k = 1.
verify_cost() {
  if [[ $HAS_DEVICE == 1 && ( $(left) -ge 30 || $DRY == 1 ) ]]; then
    if run "$TESSERA" bench -m "${DIR[GPT-XL]}" --cfg 4 --verify-cost --k-range 1:32 -o csv --device cuda; then
      [[ $DRY == 1 ]] && r="(dry run)" || r=$(awk -F, '$1 ~ /^(2|4|8|16|32)$/ {printf "%sk=%s: %.2fx, verify %.3f ms (%.2fx)", (n++ ? "; " : ""), $1, $4, 1e3 * $10, $11}' "$LOG.cur")
      [[ -n $r || $DRY == 1 ]] && row "GPT-XL verify cost vs k=1; the device loop's verification of k - 1 drafts (ms, its share of the forward) | $r | | | | |" ||
        { fail "verify cost output"; row "GPT-XL verify cost | **FAILED: no csv rows** | | | | |"; }
    else fail "verify cost"; row "GPT-XL verify cost | **FAILED** | | | | |"; fi
  elif [[ $HAS_DEVICE == 1 ]]; then row "GPT-XL verify cost | skipped: time budget | | | | |"; fi
}

# 5b. A round's cost at fixed acceptance (issue 42's target: at most 1.3x one target step plus k
# draft steps): random GPT-XL with the random GPT-B as its draft model, `addition` with ε = 1
# (f = min(1, (p + 1)/q) = 1: every draft accepted whatever the random models say, so each round
# is k draft steps, one target pass of k + 1 positions and the walk), fixed lengths 4 and 8 (their
# rounds burst on the device loop), against the same run's vanilla step and GPT-B's own step.
round_cost() {
  [[ $HAS_DEVICE == 1 ]] || return
  if [[ $(left) -lt 60 && $DRY == 0 ]]; then row "GPT-XL round cost | skipped: time budget | | | | |"; return; fi
  local draft_ms="" r
  if run "$TESSERA" bench -m "${DIR[GPT-B]}" -n 1 --cfg 4 --json --device cuda; then
    [[ $DRY == 1 ]] || draft_ms=$(awk -v t="$(field '["tokens_per_s"]')" 'BEGIN{ if (t > 0) printf "%.5f", 1e3 / t }')
  fi
  [[ -n $draft_ms || $DRY == 1 ]] || { fail "round cost: GPT-B step"; row "GPT-XL round cost | **FAILED: GPT-B step** | | | | |"; return; }
  if run "$TESSERA" bench -m "${DIR[GPT-XL]}" --draft "${DIR[GPT-B]}" --methods addition --addition-eps 1 \
       --draft-lens 4,8 -n 1 --cfg 4 --quality off --json --device cuda; then
    [[ $DRY == 1 ]] && return
    r=$($PY scripts/round_cost.py "$LOG.cur" "$draft_ms")
    [[ -n $r ]] && row "GPT-XL round at fixed acceptance (GPT-B draft, every draft accepted): round ms / (target step + k draft steps), target <= 1.3x | $r | | | | |" ||
      { fail "round cost output"; row "GPT-XL round cost | **FAILED: no JSON** | | | | |"; }
  else fail "round cost"; row "GPT-XL round cost | **FAILED** (rc $?) | | | | |"; fi
}

# 6. Speculative methods on the GPU (issue 42): each against vanilla in one run on the emoji model
# and its companion drafters, with top-1 quality, the mean round's milliseconds by phase (the
# draft, the target forward, verification: target distributions and rules; with the device loop
# the target forward's launch only, verification waits for it) and the rounds the device loop
# verified (chains and trees under every rule).
# A trip packed by scripts/gpu-trip.sh leaves the emoji heads and the quality classifier here:
# the methods whose heads did not travel are named in the table instead of failing the run, and
# quality is off without the classifier.
METHODS=${GPU_CHECK_METHODS:-sd,sjd,gsd,lantern,cool-sd,eagle,medusa,hawk}
# The trees' rows: the same methods drafting trees on the device loop (EAGLE-2's dynamic trees
# ranked there, static trees drawn there), `--tree` for every method of the run.
# A row @len:N runs its methods with --draft-len N instead: a fixed length, beside the default
# rows' --draft-len auto, whose draft model's chain rounds burst on the device within the spans
# the policy holds a length for (the "in bursts" column; docs/methods.md "Held lengths"). A row
# @hold:N runs auto with --draft-hold N: hold:1 chooses every round and never bursts, so against
# the default rows it measures what the bursts save.
TREES=${GPU_CHECK_TREES:-sd,eagle@dynamic lantern,eagle@kary:2,2,1 sd,lantern,cool-sd@len:5 sd,lantern,sjd@hold:1}
MROWS=() MNOTE=""
# methods_run LIST [TREE]: one bench --methods run of LIST (with --tree TREE, --draft-len N for
# len:N or --draft-hold N for hold:N), its rows in MROWS.
methods_run() {
  [[ $HAS_DEVICE == 1 ]] || return
  local kept=() m quality=() tree=${2:-} tag="" extra=()
  if [[ $tree == len:* ]]; then
    tag=" (--draft-len ${tree#len:})"; extra=(--draft-len "${tree#len:}")
  elif [[ $tree == hold:* ]]; then
    tag=" (--draft-hold ${tree#hold:})"; extra=(--draft-hold "${tree#hold:}")
  elif [[ -n $tree ]]; then
    tag=" (--tree $tree)"; extra=(--tree "$tree")
  fi
  for m in ${1//,/ }; do
    case $m in
      eagle|medusa|medusa-typical|hawk)
        local heads=models/emoji/${m%-typical}
        if [[ ! -e $heads/config.json ]]; then
          MROWS+=("| $m$tag | not run: $heads did not travel (scripts/gpu-trip.sh pack) | | | | | |")
          continue
        fi ;;
    esac
    kept+=("$m")
  done
  [[ -e models/emoji/classifier/classifier.safetensors ]] || { quality=(--quality off); MNOTE="; quality off: models/emoji/classifier did not travel"; }
  [[ ${#kept[@]} -gt 0 ]] || return
  local list; list=$(IFS=,; echo "${kept[*]}")
  if [[ $(left) -lt 60 && $DRY == 0 ]]; then MROWS+=("| $list$tag | skipped: time budget | | | | | |"); return; fi
  if run "$TESSERA" bench -m models/emoji/target --methods "$list" -n 4 --json --device cuda "${quality[@]}" "${extra[@]}"; then
    [[ $DRY == 1 ]] && return
    local got=()
    mapfile -t got < <($PY - "$LOG.cur" "$tag" <<'PYEOF'
import sys
sys.path.insert(0, "scripts")
from bench_json import last_methods
rows = last_methods(open(sys.argv[1]).read())
if rows is None:
    sys.exit(0)
tag = sys.argv[2]
for r in rows:
    if tag and r["method"] == "vanilla":
        continue  # the first table's
    rounds = max(1, r["batched_target_forwards"])
    ms = {k: 1e3 * v / rounds for k, v in r["time_split_s"].items()}
    q = (r.get("quality") or {}).get("top1")
    top1 = f"{q['value']:.2f} [{q['lo']:.2f}, {q['hi']:.2f}]" if q else "-"
    # Rounds after the prefills (batch 1: one per image), and those the device loop verified.
    spec_rounds = max(0, r["batched_target_forwards"] - r["images"])
    # Verified on the device / all (those whose target pass and walk replayed a graph); drafted
    # there (those whose forwards replayed a graph).
    device = (f"{r.get('device_rounds', 0)}/{spec_rounds} ({r.get('replayed_verify_rounds', 0)});"
              f" drafted {r.get('device_drafted_rounds', 0)}"
              f" ({r.get('replayed_draft_rounds', 0)}); burst {r.get('burst_rounds', 0)}"
              if r["method"] != "vanilla" else "-")
    print(f"| {r['method']}{tag} | {r['tokens_per_s']:.0f} | {r['speedup_vs_vanilla']:.2f}x | "
          f"{r['mean_accepted_length']:.2f} | {ms['draft']:.3f} / {ms['target']:.3f} / "
          f"{ms['verify'] + ms['rules']:.3f} | {device} | "
          f"{top1} |")
PYEOF
)
    MROWS+=("${got[@]}")
    [[ ${#got[@]} -gt 0 ]] || { fail "methods$tag: no JSON"; MROWS+=("| $list$tag | **FAILED: no JSON** | | | | | |"); }
  else fail "methods$tag"; MROWS+=("| $list$tag | **FAILED** (rc $?) | | | | | |"); fi
}
methods_table() {
  local t
  methods_run "$METHODS"
  for t in $TREES; do methods_run "${t%@*}" "${t#*@}"; done
}

# 6b. MAR on the GPU (issue 42, item 4): random MAR-B in the official layout, converted; one image
# of 64 MAR steps at cfg 3, its diffusion chains stepped where the head's outputs are (device
# loop) against the host loop's (every diffusion step's outputs read back), in tokens/s.
mar_row() {
  [[ $HAS_DEVICE == 1 ]] || return
  if [[ $(left) -lt 90 && $DRY == 0 ]]; then row "MAR-B cfg 3 batch 1 | skipped: time budget | | | | |"; return; fi
  local d=$WORK/mar-b on="—" off="—" l v
  if [[ ! -f $d/config.json ]] && ! run $PY python/make_random_mar.py --model mar_base --out "$d"; then
    fail "make MAR-B"; row "MAR-B cfg 3 batch 1 | **FAILED: make_random_mar** | | | | |"; return
  fi
  for l in on off; do
    if run "$TESSERA" bench -m "$d" --steps 64 --cfg 3 -n 1 --json --device cuda --device-loop $l; then
      [[ $DRY == 1 ]] && continue
      v=$(field '["runs"][0]["tokens_per_s"]')
      [[ -n $v ]] && v=$(printf '%.0f (%s MAR steps on the device)' "$v" "$(field '["runs"][0]["device_steps"]')") ||
        { v="**FAILED: no JSON**"; fail "MAR-B $l"; }
    else v="**FAILED** (rc $?)"; fail "MAR-B $l"; fi
    [[ $l == on ]] && on=$v || off=$v
  done
  row "MAR-B cfg 3 batch 1, 64 steps (tokens/s) | $on | $off | | | |"
}

# Batch 1 of every model first, then the verification cost and the methods, then the larger
# batches: a spent budget cuts the latter.
for item in $PLAN; do [[ $item == *:1 ]] && timed_row "$item"; done
verify_cost
round_cost
methods_table
mar_row
for item in $PLAN; do [[ $item == *:1 ]] || timed_row "$item"; done

# 7. The tables.
{
  echo "## gpu-check $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo "tokens/s (bf16 torch, 256-token images; tessera as stored); GB/s = weight bytes per step / step time, % of $READ_GBS"
  echo
  echo "| row | tessera (device loop) | tessera (host loop) | torch eager | torch.compile | tessera / compile | GB/s tessera / compile |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  if [[ ${#MROWS[@]} -gt 0 ]]; then
    echo "speculative methods on the emoji model (bench --methods, 4 images, batch 1; quality: top-1 with its 95% interval$MNOTE)"
    echo
    echo "| method | tokens/s | vs vanilla | mean accepted length | ms per round: draft / target / verify | rounds on the device: verified/all (graph); drafted (graph); in bursts | top-1 |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${MROWS[@]}"
    echo
  fi
  # A graph that fails to capture runs its ops one by one (correct, slower): its reason is logged.
  captured_not=$(grep -c "CUDA graph capture failed" "$LOG" || true)
  echo "CUDA graph captures that failed (their ops ran one by one): ${captured_not:-0}$(grep -m1 "CUDA graph capture failed" "$LOG" | sed 's/^/; first: /')"
  echo
  echo "total $((SECONDS - START)) s; $([[ $FAILED == 0 ]] && echo 'all passed' || echo 'FAILURES: see rows and log')"
} | tee "$WORK/table.md"
if [[ -n $REPORT && $DRY == 0 ]]; then
  { cat "$WORK/table.md"; echo; echo '<details><summary>log</summary>'; echo; echo '```'; cat "$LOG"; echo '```'; echo '</details>'; } >"$REPORT"
fi
exit $FAILED
