#!/usr/bin/env python3
"""Runs the README's commands as written (issue 39), so that an example that stops working fails a
test instead of a new user.

Every line of every ```sh block in README.md is a command (a trailing backslash continues it; a
'#' comment is dropped). Placeholders take the default model's family: DIR is models/emoji/target,
DRAFT_DIR models/emoji/draft; optional parts in [brackets] are left out. `tessera` and
`./build/tessera` are the binary under test. Each command is then either run, in order, in one
scratch directory (a later command may read what an earlier one wrote) and must exit 0 within its
time limit, or skipped for a stated reason: it is long (a sweep, a 64-image bench), needs what the
repository does not ship (official checkpoints, a t2i model), or is a pattern rather than a
command ("..."). A command that fits no rule is run: a new example is tested by default.

Usage: python3 scripts/readme_commands.py BUILD/tessera [--list]   (ctest: readme_commands)
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 120

# (pattern, reason): a command matching the pattern is not run. Checked in order.
SKIP = [
    (r"\.\.\.|\|(?!\|)\S*\s*$|\w\|\w+(\|\w+)*\s", "a pattern, not a command (\"...\" or a|b)"),
    (r"^bash scripts/(quickstart|test)\.sh", "the README's setup and test commands (CI runs them)"),
    (r"^(cmake|ninja|ctest|clang-format) ", "a build or development command"),
    (r"pip install \.", "builds the Python package (scripts/test-python.sh runs it, and "
     "python/test_package.py the README's Python example)"),
    (r"/usr/bin/python3 tools/convert_", "needs the official checkpoints (downloaded by the user)"),
    (r"tessera_eval", "needs reference images and the evaluation venv"),
    (r"models/mar_", "needs the converted MAR checkpoints"),
    (r"--caption|-m T2I\b|-m T5_DIR\b|models/t2i_", "needs a text-conditional (t2i) model and its T5 encoder"),
    (r"DIR_BF16|DIR_F32", "needs a bf16 and an f32 copy of a model (tools/recast_model.py)"),
    (r"\btune\b", "long: a sweep of the method's grid (minutes to hours)"),
    (r"--methods|--kernels|--verify-cost|--repeat|--against|--torch",
     "long: a benchmark (a minute or more)"),
    (r"-n 64\b", "long: 64 images per configuration"),
]


def commands(readme):
    """(line number, command) of every line of the ```sh blocks."""
    out, block, pending, start = [], False, "", 0
    for n, line in enumerate(open(readme, encoding="utf-8"), 1):
        s = line.rstrip("\n")
        if s.startswith("```"):
            block = s.strip() == "```sh" if not block else False
            continue
        if not block:
            continue
        code = re.sub(r"(^|\s)#.*$", "", s).rstrip()  # a comment after the command
        if not pending:
            start = n
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        cmd = (pending + code).strip()
        pending = ""
        if cmd:
            out.append((start, cmd))
    return out


def substitute(cmd, binary):
    cmd = re.sub(r"\s\[[^\]]*\]", "", cmd)  # optional parts
    cmd = re.sub(r"\bDRAFT_DIR\b", "models/emoji/draft", cmd)
    cmd = re.sub(r"(?<![\w/])DIR\b", "models/emoji/target", cmd)
    cmd = re.sub(r"^(\./build/)?tessera\b", shlex.quote(binary), cmd)
    return cmd


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    listing = "--list" in sys.argv[2:]
    failures, ran, skipped = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="tessera_readme_") as tmp:
        os.symlink(os.path.join(ROOT, "models"), os.path.join(tmp, "models"))
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        env.pop("TESSERA_DEFAULT_MODEL", None)
        for line, cmd in commands(os.path.join(ROOT, "README.md")):
            shown = re.sub(r"\s\[[^\]]*\]", "", cmd)  # what runs: without the optional parts
            reason = next((r for p, r in SKIP if re.search(p, shown)), None)
            if reason:
                skipped += 1
                print(f"README.md:{line}: skipped ({reason}): {cmd}")
                continue
            run = substitute(cmd, binary)
            if listing:
                print(f"README.md:{line}: would run: {run}")
                continue
            t0 = time.monotonic()
            try:
                r = subprocess.run(run, shell=True, cwd=tmp, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT_S)
                ok, detail = r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]
            except subprocess.TimeoutExpired:
                ok, detail = False, f"timed out after {TIMEOUT_S} s"
            ran += 1
            dt = time.monotonic() - t0
            print(f"README.md:{line}: {'ok' if ok else 'FAILED'} ({dt:.1f} s): {cmd}")
            if not ok:
                print(f"    {run}\n    {detail}")
                failures.append((line, cmd, detail))
    print(f"{ran} README commands run, {skipped} skipped, {len(failures)} failed")
    if failures:
        sys.exit(1)
    if not listing and ran < 10:  # the blocks moved or changed their fence: nothing is tested
        sys.exit(f"only {ran} README commands ran; expected the ```sh blocks' examples")


if __name__ == "__main__":
    main()
