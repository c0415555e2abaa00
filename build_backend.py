"""The build backend: setuptools' own, behind a check that the build can succeed.

Without it, a missing setuptools, torch, cargo or C++ compiler surfaces as a traceback
from deep inside pip or setup.py. Here each stops the build with one line that names
what is missing and how to get it. setup.py runs the same check, for direct use
(``python setup.py build_ext --inplace``).

This module uses the standard library only: it runs before anything is known to be
installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil

# The torch minor release the adapter (csrc/) is written for. torch's SymmetricMemory
# interface changes every minor release, so another minor is refused here rather than
# failing later in the C++ compiler or, worse, at import.
SUPPORTED_TORCH = (2, 11)

_TORCH = f"{SUPPORTED_TORCH[0]}.{SUPPORTED_TORCH[1]}"


def torch_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string such as ``2.11.0+cu130``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def missing_build_tool() -> str | None:
    """What the build lacks, as one line, or None when everything is there."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed: pip install setuptools ninja"
    if importlib.util.find_spec("torch") is None:
        # Also what an isolated build (the default of `pip install .` and
        # `python -m build`) sees: its fresh environment has no torch, by design
        # (pyproject.toml says why).
        return (
            f"torch is not installed where the build runs: install torch {_TORCH} first "
            f"(pip install 'torch=={_TORCH}.*'), then build against it without build "
            "isolation: pip install --no-build-isolation ."
        )
    try:
        found = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        found = None  # importable without metadata (e.g. a torch source tree): trust it
    if found is not None and torch_minor(found) != SUPPORTED_TORCH:
        return (
            f"symmwin's adapter is written for torch {_TORCH}, and torch {found} is "
            f"installed: pip install 'torch=={_TORCH}.*'"
        )
    cargo = os.environ.get("CARGO", "cargo")
    if not os.environ.get("SYMMWIN_PREBUILT_LIB") and shutil.which(cargo) is None:
        return (
            f"{cargo} is not on PATH: install Rust (https://rustup.rs), or point "
            "SYMMWIN_PREBUILT_LIB at a libsymmwin_capi.a built where cargo is"
        )
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx} is not on PATH): install g++ (apt install g++), or set CXX"
    return None


def stop_if_missing() -> None:
    """Ends the build with one line when :func:`missing_build_tool` finds something."""
    problem = missing_build_tool()
    if problem:
        raise SystemExit(f"symmwin build: {problem}")


def _checked(hook_name: str):
    def hook(*args, **kwargs):
        stop_if_missing()
        from setuptools import build_meta

        return getattr(build_meta, hook_name)(*args, **kwargs)

    hook.__name__ = hook_name
    return hook


# The PEP 517 / PEP 660 hooks, each setuptools' own after the check.
get_requires_for_build_wheel = _checked("get_requires_for_build_wheel")
prepare_metadata_for_build_wheel = _checked("prepare_metadata_for_build_wheel")
build_wheel = _checked("build_wheel")
get_requires_for_build_editable = _checked("get_requires_for_build_editable")
prepare_metadata_for_build_editable = _checked("prepare_metadata_for_build_editable")
build_editable = _checked("build_editable")
get_requires_for_build_sdist = _checked("get_requires_for_build_sdist")
build_sdist = _checked("build_sdist")
