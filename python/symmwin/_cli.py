"""The `symmwin` command: the Rust binary shipped inside this package (bin/symmwin),
run in place of this process, as ruff's wheel runs its binary."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def binary() -> Path:
    """Where the wheel put the `symmwin` binary."""
    return Path(__file__).resolve().parent / "bin" / "symmwin"


def main() -> None:
    exe = binary()
    if not os.access(exe, os.X_OK):
        sys.exit(
            f"symmwin: this installation has no command binary ({exe}): it was built from "
            "SYMMWIN_PREBUILT_LIB without SYMMWIN_PREBUILT_CLI; build the wheel with cargo "
            "on PATH (pip wheel . -w dist --no-build-isolation --no-deps)"
        )
    # exec, not a child process: signals, exit status and the terminal go straight to
    # the binary (it finds itself through /proc/self/exe to start the demo's ranks).
    os.execv(exe, ["symmwin", *sys.argv[1:]])
