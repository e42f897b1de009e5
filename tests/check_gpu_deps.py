#!/usr/bin/env python3
"""Every dependency CMake requires in the GPU check's configuration must be on the GPU machine's
image or carried to it by scripts/gpu-deps.sh (the image reaches no package registry:
../shared/notes/gpu_machine.md). Session 30 lost a device call to cpp-httplib, required since
tools/serve and neither on the image nor carried; this check fails on such a dependency here.

Usage: check_gpu_deps.py [SOURCE_DIR]"""
import re
import subprocess
import sys
from pathlib import Path

# On the GPU image (Ubuntu 24.04; the notes' "headers present" and the CUDA toolkit).
ON_IMAGE = {"Threads", "nlohmann_json", "CLI11", "PNG", "Eigen3", "GTest", "CUDAToolkit",
            "OPENBLAS_LIBRARY"}  # OpenBLAS's shared library: gpu-check.sh passes its path
# Carried: the dependency, and the package of scripts/gpu-deps.sh that brings it.
CARRIED = {"JPEG": "libjpeg62-turbo-dev", "Freetype": "libfreetype-dev", "PkgConfig": "pkgconf",
           "libwebp": "libwebp-dev", "libwebpmux": "libwebp-dev",
           "CBLAS_INCLUDE_DIR": "libopenblas-pthread-dev (headers only)"}
# Options as gpu-check.sh configures on the image: blocks under them are in or out.
OPTIONS = {"TESSERA_CUDA": True, "TESSERA_FUZZ": False, "TESSERA_SERVE": False, "TESSERA_TEXT": False,
           "TESSERA_BUILD_TESTS": True}

REQUIRED = [
    (re.compile(r"find_package\((\w+)[^)]*\bREQUIRED"), lambda m: [m.group(1)]),
    (re.compile(r"pkg_check_modules\(\w+ REQUIRED(?: IMPORTED_TARGET)? ([^)]*)\)"),
     lambda m: m.group(1).split()),
    (re.compile(r"find_(?:path|library)\((\w+)[^)]*\bREQUIRED"), lambda m: [m.group(1)]),
]


def required_on_gpu(path):
    """(dependency, line) pairs CMake requires at `path` in the GPU check's configuration."""
    out, stack = [], []  # stack: is each enclosing block taken (None: not an option we know)
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        code = line.split("#", 1)[0].strip()
        m = re.match(r"(else)?if\((NOT )?(\w+)\)$", code)
        if m and m.group(3) in OPTIONS:
            taken = OPTIONS[m.group(3)] != bool(m.group(2))
            if m.group(1): stack.pop()
            stack.append(taken)
            continue
        if re.match(r"(else)?if\(", code):
            if code.startswith("elseif"): stack.pop()
            stack.append(None)
            continue
        if code.startswith("else("):
            stack[-1] = None if stack[-1] is None else not stack[-1]
            continue
        if code.startswith("endif("):
            stack.pop()
            continue
        if any(t is False for t in stack):
            continue
        for pattern, names in REQUIRED:
            for m in pattern.finditer(code):
                out += [(d, f"{path}:{n}") for d in names(m)]
    return out


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    listed = subprocess.run(["bash", str(root / "scripts/gpu-deps.sh"), "--list"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    problems = []
    deps = required_on_gpu(root / "CMakeLists.txt") + required_on_gpu(root / "tests/CMakeLists.txt")
    for dep, where in deps:
        if dep in ON_IMAGE:
            continue
        if dep not in CARRIED:
            problems.append(f"{where}: {dep} is required but neither on the GPU image nor carried "
                            "by scripts/gpu-deps.sh (carry it, or put it under an option "
                            "gpu-check.sh turns off)")
        elif CARRIED[dep] not in listed:
            problems.append(f"{where}: {dep} needs {CARRIED[dep]}, which scripts/gpu-deps.sh "
                            "does not download")
    check = (root / "scripts/gpu-check.sh").read_text()
    for opt, on in OPTIONS.items():
        if opt != "TESSERA_BUILD_TESTS" and opt != "TESSERA_FUZZ" and f"-D{opt}=" not in check:
            problems.append(f"scripts/gpu-check.sh does not set -D{opt} (this check assumes "
                            f"{'ON' if on else 'OFF'})")
    for p in problems:
        print(p, file=sys.stderr)
    if not deps:
        print("check_gpu_deps: no dependency found: the parser broke", file=sys.stderr)
        return 1
    print(f"check_gpu_deps: {len(deps)} required dependencies, all on the GPU image or carried"
          if not problems else f"check_gpu_deps: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
