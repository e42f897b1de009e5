#!/usr/bin/python3
"""Checks of the Python side's atomic writes (python/tessera_ref/atomic_io.py, issue 21): a file is
written whole or not at all, and a converter whose write fails (here: a file size limit, as a
full disk would) exits 2 with one "error: cannot write ..." line and leaves the model directory
as it was: no torn file, no temporary, previous files byte-identical.

  /usr/bin/python3 python/test_atomic_io.py
"""
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from tessera_ref.atomic_io import atomic_write  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "llamagen", "pt")
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        FAILS.append(msg)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def temporaries(directory):
    return [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]


def file_size_limit(limit):
    """preexec_fn: writes past `limit` bytes fail with EFBIG instead of killing the process."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return apply


def unit_checks(tmp):
    p = os.path.join(tmp, "a.json")
    with atomic_write(p, "w") as f:
        f.write('{"x": 1}\n')
    mask = os.umask(0)
    os.umask(mask)
    check(read(p) == b'{"x": 1}\n' and stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~mask,
          "a new file has its contents and the umask's permissions")
    check(temporaries(tmp) == [], "no temporary after a write")

    os.chmod(p, 0o640)
    with atomic_write(p, "wb") as f:
        f.write(b"short")
    check(read(p) == b"short" and stat.S_IMODE(os.stat(p).st_mode) == 0o640,
          "an overwrite replaces the whole file and keeps its permissions")

    try:
        with atomic_write(p, "wb") as f:
            f.write(b"partial")
            raise RuntimeError("producing the content failed")
    except RuntimeError:
        pass
    check(read(p) == b"short" and temporaries(tmp) == [],
          "an exception while writing leaves the previous file and no temporary")
    q = os.path.join(tmp, "never.bin")
    try:
        with atomic_write(q) as f:
            f.write(b"partial")
            raise RuntimeError("producing the content failed")
    except RuntimeError:
        pass
    check(not os.path.exists(q) and temporaries(tmp) == [], "... and no new file")

    missing = os.path.join(tmp, "no_dir", "x.bin")
    try:
        with atomic_write(missing) as f:
            f.write(b"x")
        check(False, "a missing directory raises")
    except FileNotFoundError as e:
        check(e.filename == missing, f"a missing directory raises naming the target ({e})")
    try:
        with atomic_write(tmp) as f:
            f.write(b"x")
        check(False, "a directory as the target raises")
    except IsADirectoryError as e:
        check(e.filename == tmp, f"a directory as the target raises naming it ({e})")

    # A write past the file size limit, in a child process: EFBIG names the target.
    big = os.path.join(tmp, "big.bin")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tessera_ref.atomic_io import atomic_write\n"
            "try:\n"
            "    with atomic_write(sys.argv[2]) as f: f.write(b'x' * 200000)\n"
            "except OSError as e: print(e.filename, e.strerror); sys.exit(3)\n")
    r = subprocess.run([PY, "-c", code, HERE, big], capture_output=True, text=True,
                       preexec_fn=file_size_limit(65536))
    check(r.returncode == 3 and r.stdout.strip() == f"{big} File too large",
          f"a write past the file size limit raises 'File too large' naming the target ({r.stdout.strip()})")
    check(not os.path.exists(big) and temporaries(tmp) == [], "... and leaves no file, no temporary")

    with atomic_write(os.devnull, "wb") as f:  # a device is written in place, never replaced
        f.write(b"discarded")
    check(stat.S_ISCHR(os.stat(os.devnull).st_mode), "/dev/null is written in place")


def convert(out, dtype, limit=None):
    cmd = [PY, os.path.join(ROOT, "tools", "convert_llamagen.py"), "--gpt", os.path.join(FIXTURES, "c2i_gpt.pt"),
           "--vq", os.path.join(FIXTURES, "vq.pt"), "--out", out, "--gpt-model", "custom", "--dim", "64",
           "--n-layer", "2", "--n-head", "4", "--image-size", "16", "--downsample", "4", "--num-classes", "10",
           "--vocab-size", "256", "--vq-model", "custom", "--dtype", dtype]
    return subprocess.run(cmd, capture_output=True, text=True,
                          preexec_fn=file_size_limit(limit) if limit else None)


def converter_checks(tmp):
    out = os.path.join(tmp, "model")
    # gpt.safetensors is about 0.6 MiB: a 64 KiB limit stops it part-way.
    r = convert(out, "f32", limit=65536)
    lines = r.stderr.splitlines()
    want = f"error: cannot write {os.path.join(out, 'gpt.safetensors')}: File too large"
    check(r.returncode == 2 and lines == [want], f"a failed conversion exits 2 with '{want}' (got {r.stderr!r})")
    check(os.listdir(out) == [], f"... and leaves an empty directory (got {os.listdir(out)})")

    r = convert(out, "f32")
    check(r.returncode == 0, f"the same conversion without the limit succeeds {r.stderr.strip()}")
    before = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
    check(sorted(before) == ["config.json", "gpt.safetensors", "vq.safetensors"],
          f"... and writes the model directory ({sorted(before)})")
    r = convert(out, "bf16", limit=65536)
    check(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "File too large" in r.stderr,
          f"re-converting over it under the limit fails with one error line ({r.stderr!r})")
    after = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
    check(after == before, "... and leaves every previous file byte-identical, no temporary")


def main():
    tmp = tempfile.mkdtemp(prefix="tessera_test_atomic_")
    try:
        unit_checks(tmp)
        converter_checks(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
