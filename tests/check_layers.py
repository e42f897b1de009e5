#!/usr/bin/env python3
"""Checks tessera's layering (docs/architecture.md): a file in src/<layer>/ may include headers of
its own layer and of the layers below it, never above; the public headers (include/tessera/)
include only each other; the front-ends (tools/) see only the public API and their own headers.

Exit status 1 and one line per violation when a rule is broken. Usage: check_layers.py [ROOT]
"""
import pathlib
import re
import sys

# Headers the build writes for the front-ends (cmake/git_commit.cmake: the commit --version names).
GENERATED = {"tessera_commit.h"}

# Lowest first. A layer may include itself and anything earlier in this list.
LAYERS = ["common", "tensor", "io", "models", "sampling", "decode", "speculative", "pipeline",
          "eval"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: str):
    head = path.split("/", 1)[0]
    return LAYERS.index(head) if head in LAYERS else None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = []
    for f in sorted(root.glob("src/**/*")):
        if f.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        rel = f.relative_to(root / "src").as_posix()
        own = layer_of(rel)
        if own is None:
            errors.append(f"src/{rel}: not in a known layer ({', '.join(LAYERS)})")
            continue
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            if inc.startswith("tessera/"):
                continue
            other = layer_of(inc)
            if other is None:
                errors.append(f"src/{rel}: includes \"{inc}\", which is in no layer")
            elif other > own:
                errors.append(f"src/{rel}: layer '{LAYERS[own]}' includes \"{inc}\" from the "
                              f"higher layer '{LAYERS[other]}'")
    for f in sorted(root.glob("include/tessera/**/*.h")):
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            if not inc.startswith("tessera/"):
                errors.append(f"{f.relative_to(root)}: public header includes internal \"{inc}\"")
    for f in sorted(root.glob("tools/**/*")):
        if f.suffix not in (".h", ".cpp"):
            continue
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            local = (f.parent / inc).exists() or inc in GENERATED
            if not inc.startswith("tessera/") and not local:
                errors.append(f"{f.relative_to(root)}: front-end includes internal \"{inc}\" "
                              "(only include/tessera/ and its own headers)")
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
