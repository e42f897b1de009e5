"""python -m tessera.bench: what the Python package adds to an image's time, against the CLI, in
one run (issue 46's target: < 5% for vanilla).

Alternating, `repeats` times: `tessera generate` (the command installed with the package) makes n
images and reports the engine's generation seconds (--stats-out); the package's
Pipeline.generate makes the same token grids (same seeds) in this process, timed by the wall
clock around the call (the engine, the GIL taken back after every token, the arrays; neither side
decodes). Reported: the medians and their ratio. Machines are noisy: read the
spread too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import tessera
from tessera.__main__ import command


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench", description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=None, help="model directory (default: the emoji one)")
    ap.add_argument("-p", "--prompt", default="red apple")
    ap.add_argument("-n", type=int, default=8, help="images per run")
    ap.add_argument("--method", default="vanilla")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=0)
    a = ap.parse_args()
    model = a.model or tessera.default_model()
    pipe = tessera.Pipeline(model, threads=a.threads)
    cli = command()
    pipe.generate(a.prompt, n=1, method=a.method, output="tokens")  # warm caches
    cli_s, pkg_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        for r in range(a.repeats):
            out = ["--tokens-out", os.path.join(tmp, "t.npy")]
            subprocess.run([cli, "generate", "-m", model, a.prompt, "-n", str(a.n), "-b",
                            str(min(a.n, 16)), "--seed", str(r), "--method", a.method,
                            "-t", str(a.threads), "--stats-out", stats_path, "-q", *out],
                           check=True)
            with open(stats_path) as f:
                cli_s.append(json.load(f)["seconds"])
            t0 = time.perf_counter()
            pipe.generate(a.prompt, n=a.n, seed=r, method=a.method, output="tokens")
            pkg_s.append(time.perf_counter() - t0)
    c, p = statistics.median(cli_s), statistics.median(pkg_s)
    print(f"model {model}, {a.n} {a.method} images per run, {a.repeats} runs, "
          f"{pipe.threads} threads")
    print(f"CLI generate (engine seconds): median {c:.3f} s  [{min(cli_s):.3f}, {max(cli_s):.3f}]")
    print(f"package generate (wall):       median {p:.3f} s  [{min(pkg_s):.3f}, {max(pkg_s):.3f}]")
    print(f"package / CLI: {p / c:.3f}x ({100 * (p / c - 1):+.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
