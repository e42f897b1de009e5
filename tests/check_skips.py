#!/usr/bin/env python3
"""Fails when a ctest run skipped a test for a reason other than missing hardware.

ctest counts a skipped test (GoogleTest's GTEST_SKIP) as not failed, so a test that cannot run in
CI's environment (not root, no setpriv, no unshare, a missing tool) would pass unnoticed. The only
acceptable reason is hardware the machine does not have, which a skip says by starting its
message with one of ALLOWED: a GPU (the CUDA backend's tests, to come) or AMX tiles (the opt-in
amx linear path's parity needs an Intel CPU with AMX).

Usage: check_skips.py JUNIT.xml...   (ctest --output-junit FILE writes one)
"""
import sys
import xml.etree.ElementTree as ET

ALLOWED = ("no GPU", "no AMX")


def skip_reason(output):
    """The message GTEST_SKIP() printed: the lines after 'file:line: Skipped' up to the
    '[  SKIPPED ]' line ('' when the output has none)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.endswith(": Skipped"):
            reason = []
            for rest in lines[i + 1:]:
                if rest.startswith("[  SKIPPED ]"):
                    break
                reason.append(rest)
            return "\n".join(reason).strip()
    return ""


def bad_skips(junit_path):
    """(test name, reason) of every skipped test whose reason is not an allowed one."""
    bad = []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        if case.find("skipped") is None:
            continue
        out = case.find("system-out")
        reason = skip_reason(out.text if out is not None and out.text else "")
        if not reason.startswith(ALLOWED):
            bad.append((case.get("name"), reason or "(no reason given)"))
    return bad


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    bad = [(p, name, reason) for p in paths for name, reason in bad_skips(p)]
    for path, name, reason in bad:
        print(f"{path}: {name} was skipped: {reason}", file=sys.stderr)
    if bad:
        print(f"check_skips: {len(bad)} test(s) skipped for a reason other than missing "
              f"hardware ({', '.join(ALLOWED)}): make them run here, or fix the environment",
              file=sys.stderr)
        return 1
    print("check_skips: no test skipped but for missing hardware")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
