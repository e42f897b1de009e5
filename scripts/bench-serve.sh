#!/usr/bin/env bash
# Serving throughput of `tessera serve` on loopback (docs/serving.md): per method (default vanilla
# and sd), a one-at-a-time server (-b 1) and a batched one (-b 16), each driven by 1, 4, 8 and 16
# concurrent clients; prints a markdown table and the batched-at-8-clients / one-at-a-time-at-1
# ratio against the 3x target. The logic is scripts/bench_serve.py (Python 3 standard library).
# Usage: bash scripts/bench-serve.sh [--methods vanilla,sd | --mix sd,lantern,cool-sd]
#        [--clients 1,4,8,16] [--requests 32]
#        [--threads T] [--model DIR] [--json-out FILE] [--binary build/tessera]
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/bench_serve.py "$@"
