#!/usr/bin/env bash
# Runs every libFuzzer target of a TESSERA_FUZZ build for SECONDS each, two at a time, each on a
# scratch copy of its committed corpus (new inputs never land in the repository). A crash, leak,
# timeout, sanitizer report or uncaught non-tessera exception fails the run; the input is left in
# OUT/<target>/ (copy it to tests/fuzz/regressions/<target>/ once fixed).
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS] [OUT]
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS] [OUT]}
seconds=${2:-60}
out=${3:-$(mktemp -d /tmp/tessera-fuzz.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)

run_one() {
  local t=$1
  local dir="$out/$t"
  mkdir -p "$dir/corpus"
  # libFuzzer adds what it finds to the first directory only; the committed corpus is read.
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="$here/dict/$t.dict" -artifact_prefix="$dir/" -print_final_stats=1 \
    "$dir/corpus" "$here/corpus/$t" >"$dir/log" 2>&1
}

report() {
  local t=$1 log="$out/$1/log"
  local cov stats
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -n 1 || true)
  stats=$(grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$log" |
            sed -e 's/^stat:://' -e 's/: */=/' | tr '\n' ' ' || true)
  echo "fuzz_$t: ok ($cov; $stats)"
}

status=0
# Two at a time: CI has two cores.
for pair in "safetensors npy" "config png"; do
  read -r a b <<<"$pair"
  run_one "$a" & pa=$!
  run_one "$b" & pb=$!
  for t in "$a" "$b"; do
    pid=$pa
    [ "$t" = "$b" ] && pid=$pb
    if wait "$pid"; then
      report "$t"
    else
      echo "fuzz_$t: FAILED, the input is in $out/$t/; the end of its log:" >&2
      tail -n 60 "$out/$t/log" >&2
      status=1
    fi
  done
done
exit $status
