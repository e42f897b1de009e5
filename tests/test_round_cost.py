#!/usr/bin/env python3
"""scripts/round_cost.py (gpu-check step 5b) on a made-up bench output with known numbers, and on
a real `tessera bench --methods addition --addition-eps 1 --draft-lens 4` run of the emoji pair on
the CPU, so that a renamed JSON field fails here rather than on a lent GPU.

Usage: test_round_cost.py SOURCE_DIR TESSERA_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

src, tessera = sys.argv[1], sys.argv[2]
script = os.path.join(src, "scripts", "round_cost.py")


def row(method, k, seconds, forwards, mal):
    return {"method": method, "draft_len": k, "batched_target_forwards": forwards,
            "mean_accepted_length": mal,
            "time_split_s": {"draft": seconds / 2, "target": seconds / 2, "verify": 0.0,
                             "rules": 0.0}}


def run(text, draft_ms):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, script, f.name, str(draft_ms)], check=True,
                              capture_output=True, text=True).stdout.strip()
    finally:
        os.unlink(f.name)


# Vanilla: 2 s over 200 forwards, 10 ms a step. k = 4: 50 forwards in 1 s, 20 ms a round, against
# 10 + 4 x 2.5 = 20 ms: 1.00x. k = 8: 30 ms against 30 ms. An auto row is left out. An earlier JSON
# object without "methods" (a progress line) and the log around it are skipped.
made = {"methods": [row("vanilla", None, 2.0, 200, 1.0), row("addition", 4, 1.0, 50, 5.0),
                    row("addition", 8, 0.9, 30, 9.0), row("sd", "auto", 1.0, 40, 6.0)]}
text = "bench: vanilla ...\n" + json.dumps({"progress": 1}) + "\n" + json.dumps(made, indent=2) + "\n"
got = run(text, 2.5)
want = ("k=4: round 20.000 ms = 1.00x (target 10.000 + 4 x 2.500 ms), MAL 5.00; "
        "k=8: round 30.000 ms = 1.00x (target 10.000 + 8 x 2.500 ms), MAL 9.00")
assert got == want, f"made-up output: got {got!r}, want {want!r}"
assert run("no JSON here\n", 1.0) == "", "no output without a methods object"

# The real thing: every draft accepted, MAL 5 (k = 4; the image's last rounds are shorter).
out = subprocess.run([tessera, "bench", "-m", os.path.join(src, "models", "emoji", "target"),
                      "--methods", "addition", "--addition-eps", "1", "--draft-lens", "4", "-n",
                      "1", "--quality", "off", "--json"], check=True, capture_output=True,
                     text=True)
got = run(out.stdout, 1.0)
assert got.startswith("k=4: round ") and got.endswith("MAL 5.00"), f"tessera's output: {got!r}"
print("round_cost.py:", got)
