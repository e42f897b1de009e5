#!/usr/bin/env python3
"""tests/check_skips.py on ctest JUnit reports made up for it: missing hardware passes, any other
reason for a skip fails (exit status 1), as does a skip that gives no reason."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CASE = """<testcase name="{name}" classname="{name}" time="0.01" status="{status}">{skipped}
<system-out>Running main() from gtest_main.cc
[ RUN      ] {name}
{body}
</system-out></testcase>"""


def case(name, reason=None):
    if reason is None:
        return CASE.format(name=name, status="run", skipped="", body=f"[       OK ] {name} (1 ms)")
    body = f"/src/tests/t.cpp:9: Skipped\n{reason}\n[  SKIPPED ] {name} (0 ms)".replace("\n\n", "\n")
    return CASE.format(name=name, status="notrun",
                       skipped='<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>', body=body)


def check(cases):
    xml = '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="t">' + "".join(cases) + \
        "</testsuite>"
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(xml)
    try:
        return subprocess.run([sys.executable, os.path.join(HERE, "check_skips.py"), f.name],
                              capture_output=True, text=True)
    finally:
        os.unlink(f.name)


FAILS = []


def expect(cases, code, words=""):
    r = check(cases)
    if r.returncode != code or words not in r.stderr:
        FAILS.append(f"expected {code} and '{words}', got {r.returncode}: {r.stderr}")


expect([case("A.Runs"), case("B.Gpu", "no GPU: CUDA is not available")], 0)
expect([case("A.Runs"), case("B.Amx", "no AMX: this CPU has no AMX path")], 0)
expect([case("A.Runs"), case("C.Root", "needs root, unshare -m and tmpfs")], 1,
       "C.Root was skipped: needs root, unshare -m and tmpfs")
expect([case("D.Quiet", "")], 1, "D.Quiet was skipped: (no reason given)")
# The reason has to start with the marker: one that only mentions a GPU is another reason.
expect([case("E.Mention", "cannot reach the GPU driver's socket")], 1, "E.Mention was skipped")
expect([case("A.Runs")], 0)
for f in FAILS:
    print("FAIL", f)
print(f"{len(FAILS)} failure(s)" if FAILS else "check_skips self-test passed")
sys.exit(1 if FAILS else 0)
