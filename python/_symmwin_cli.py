"""The `symmwin` command of the wheel: runs the Rust binary the wheel put inside the
symmwin package (symmwin/bin/symmwin) in place of this process.

A module of its own, outside the package, so that the command never imports symmwin:
`import symmwin` imports torch and the extension (seconds, and a traceback when torch
is broken), while the binary needs neither. The package is only located, not
imported: its directory comes from the import system's finder, which runs no code of
the package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def binary() -> Path | None:
    """Where the wheel put the `symmwin` binary, or None when symmwin is not installed."""
    spec = importlib.util.find_spec("symmwin")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "symmwin"


def main() -> None:
    exe = binary()
    if exe is None or not os.access(exe, os.X_OK):
        sys.stderr.write(
            f"symmwin: this installation has no command binary ({exe}): it was built from "
            "SYMMWIN_PREBUILT_LIB without SYMMWIN_PREBUILT_CLI; build the wheel with cargo "
            "on PATH (pip wheel . -w dist --no-build-isolation --no-deps)\n"
        )
        # The binary's exit status for a set-up problem.
        sys.exit(3)
    # exec, not a child process: signals, exit status and the terminal go straight to
    # the binary (it finds itself through /proc/self/exe to start the demo's ranks).
    os.execv(exe, ["symmwin", *sys.argv[1:]])


if __name__ == "__main__":
    main()
