#!/usr/bin/python3
"""Checks of tools/recast_model.py: the f32 test model recast to bf16 has the very tensors the
converter wrote for bf16 (tests/fixtures/llamagen/c2i_bf16, both rounding to nearest even) and
the same config; a second recast to an existing directory, or from a directory without a model,
is a one-line error with exit 1 and writes nothing.

  /usr/bin/python3 python/test_recast_model.py
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from tessera_ref.safetensors_io import read_safetensors  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
TOOL = os.path.join(ROOT, "tools", "recast_model.py")
FIX = os.path.join(ROOT, "tests", "fixtures", "llamagen")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def run(*args):
    return subprocess.run([PY, TOOL, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    dst = os.path.join(tmp, "c2i_bf16")
    r = run(os.path.join(FIX, "c2i_f32"), dst, "--dtype", "bf16")
    check(r.returncode == 0, f"recast c2i_f32 to bf16 exits 0 ({r.stderr.strip()})")
    got = read_safetensors(os.path.join(dst, "gpt.safetensors"))
    want = read_safetensors(os.path.join(FIX, "c2i_bf16", "gpt.safetensors"))
    check(list(got) == list(want), "the same tensor names in the same order")
    check(all(k in got and got[k].dtype == want[k].dtype and torch.equal(got[k], want[k])
              for k in want),
          "every tensor equals the converter's bf16 one")
    with open(os.path.join(dst, "config.json")) as f, \
            open(os.path.join(FIX, "c2i_bf16", "config.json")) as g:
        check(json.load(f) == json.load(g), "config.json equals the converter's bf16 one")
    check(filecmp.cmp(os.path.join(dst, "vq.safetensors"),
                      os.path.join(FIX, "c2i_f32", "vq.safetensors"), shallow=False),
          "the VQ decoder is copied as it is")
    check(not any(n.startswith("lantern_neighbours_") for n in os.listdir(dst)),
          "caches derived from the weights are left out")

    before = sorted(os.listdir(tmp))
    r = run(os.path.join(FIX, "c2i_f32"), dst, "--dtype", "f16")
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and "already exists" in r.stderr,
          f"an existing destination is one error line, exit 1 ({r.stderr.strip()})")
    r = run(tmp, os.path.join(tmp, "x"), "--dtype", "f16")
    check(r.returncode == 1 and "no config.json" in r.stderr,
          f"a directory without a model is an error ({r.stderr.strip()})")
    check(sorted(os.listdir(tmp)) == before, "failed runs write nothing")

print("FAILED: " + "; ".join(FAILS) if FAILS else "all recast checks passed")
sys.exit(1 if FAILS else 0)
