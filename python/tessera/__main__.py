"""python -m tessera ARGS: the `tessera` command (generate, serve, bench, ...) installed with the
package, run with ARGS; the same program as the CLI, so the same flags and images."""
import os
import shutil
import sys


def command() -> str:
    here = os.path.join(os.path.dirname(__file__), "bin", "tessera")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("tessera")  # a build tree's package (PYTHONPATH=BUILD/python)
    built = os.path.join(os.path.dirname(__file__), "..", "..", "tessera")
    if os.access(built, os.X_OK):
        return os.path.normpath(built)
    if found:
        return found
    sys.exit("tessera: the tessera command is not installed with this package "
             "(pip install . installs it)")


def main() -> None:
    exe = command()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
