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
import sys

# The torch minor release the adapter (csrc/) is written for. torch's SymmetricMemory
# interface changes every minor release, so another minor is refused here rather than
# failing later in the C++ compiler or, worse, at import.
SUPPORTED_TORCH = (2, 11)

_TORCH = f"{SUPPORTED_TORCH[0]}.{SUPPORTED_TORCH[1]}"


def torch_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string such as ``2.11.0+cu130``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


# setuptools builds wheels by itself (bdist_wheel) from this release on; before it, the
# separate `wheel` package provides the command. Without build isolation
# pyproject.toml's `requires` is not applied, so this is checked here.
SETUPTOOLS_WITH_BDIST_WHEEL = (70, 1)

# What a build is for: the checks each purpose needs.
WHEEL = "wheel"  # a wheel (bdist_wheel, pip wheel, pip install)
WHEEL_METADATA = "wheel metadata"  # a wheel's metadata: setuptools runs bdist_wheel's code
EXTENSION = "extension"  # the C++ extension only (setup.py build_ext --inplace)
OTHER = "other"  # metadata, an sdist, --help: no compiler needed


def _setuptools_version() -> tuple[int, int] | None:
    try:
        return torch_minor(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _missing_wheel_command() -> str | None:
    found = _setuptools_version()
    if found is None or found >= SETUPTOOLS_WITH_BDIST_WHEEL:
        return None
    if importlib.util.find_spec("wheel") is not None:
        return None
    return (
        f"setuptools {found[0]}.{found[1]} cannot build a wheel (bdist_wheel is built into "
        "setuptools from 70.1) and the `wheel` package is not installed: "
        "pip install 'setuptools>=70.1'"
    )


def _missing_torch() -> str | None:
    if importlib.util.find_spec("torch") is None:
        # Worded so that it is right without knowing how the build was started: an
        # isolated build (the default of `pip install .` and `python -m build`) runs
        # in a fresh environment that has no torch, by design (pyproject.toml says why),
        # even when the user's environment has one.
        return (
            "torch is not importable where the build runs; pip's default isolated build "
            f"has none: install torch {_TORCH} (pip install 'torch=={_TORCH}.*') and build "
            "against it without build isolation: pip install --no-build-isolation ."
        )
    try:
        found = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None  # importable without metadata (e.g. a torch source tree): trust it
    if torch_minor(found) != SUPPORTED_TORCH:
        return (
            f"symmwin's adapter is written for torch {_TORCH}, and torch {found} is "
            f"installed: pip install 'torch=={_TORCH}.*'"
        )
    return None


def _missing_compilers() -> str | None:
    cargo = os.environ.get("CARGO", "cargo")
    if not os.environ.get("SYMMWIN_PREBUILT_LIB") and shutil.which(cargo) is None:
        return (
            f"{cargo} is not on PATH: install Rust (https://rustup.rs), or point "
            "SYMMWIN_PREBUILT_LIB at a libsymmwin_capi.a built where cargo is"
        )
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx} is not on PATH): install g++ (apt install g++), or set CXX"
    # torch's BuildExtension falls back to compiling one file at a time without ninja,
    # several times slower; it looks for ninja on PATH only (stop_if_missing has put
    # the ninja package's executable there, if one is installed).
    if shutil.which("ninja") is None:
        return "ninja is not on PATH: pip install ninja (into the environment that builds)"
    return None


def _ninja_of_the_python_package() -> bool:
    """Put the executable of an installed `ninja` package (PyPI's) on PATH, where torch
    looks; True when that found one. It may sit outside this interpreter's folder: in
    a venv that reuses another environment's site-packages (--system-site-packages, a
    .pth file), whose scripts folder is not this one's."""
    try:
        files = importlib.metadata.distribution("ninja").files or []
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in files:
        if file.name == "ninja" and file.parent.name == "bin":
            found = os.path.realpath(file.locate())
            if os.access(found, os.X_OK):
                folder = os.path.dirname(found)
                os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", ""), folder]).lstrip(os.pathsep)
                return True
    return False


def missing_build_tool(purpose: str = WHEEL) -> str | None:
    """What a build for `purpose` lacks, as one line, or None when everything is there."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed: pip install 'setuptools>=70.1' ninja"
    checks = [_missing_torch]
    if purpose in (WHEEL, WHEEL_METADATA):
        checks.insert(0, _missing_wheel_command)
    if purpose in (WHEEL, EXTENSION):
        checks.append(_missing_compilers)
    for check in checks:
        problem = check()
        if problem:
            return problem
    return None


def interpreter_bin_first_on_path() -> None:
    """Put the folder of the interpreter that runs the build first on PATH.

    Tools installed with pip into that environment (ninja above all) live there, and
    a venv used without activating it (`.venv/bin/python -m pip wheel .`) does not
    have it on PATH: torch would not find ninja and silently build one file at a time.
    The folder of sys.executable as given, not resolved: a venv's python is a symlink
    to the base interpreter, whose folder has none of the venv's tools.
    """
    folder = os.path.dirname(os.path.abspath(sys.executable))
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if parts[:1] != [folder]:
        os.environ["PATH"] = os.pathsep.join([folder, *[p for p in parts if p != folder]])


def purpose_of(setup_args: list[str]) -> str:
    """What `setup.py <setup_args>` builds."""
    if any(a in ("bdist_wheel", "install", "develop", "editable_wheel") for a in setup_args):
        return WHEEL
    if any(a in ("build", "build_ext") for a in setup_args):
        return EXTENSION
    if "dist_info" in setup_args:
        return WHEEL_METADATA
    return OTHER


def stop_if_missing(purpose: str = WHEEL) -> None:
    """Ends the build with one line when :func:`missing_build_tool` finds something."""
    interpreter_bin_first_on_path()
    # Every hook, not only the wheel's: setup.py makes torch's BuildExtension in each,
    # which warns that it falls back to the slow backend when it sees no ninja.
    if shutil.which("ninja") is None:
        _ninja_of_the_python_package()
    problem = missing_build_tool(purpose)
    if problem:
        raise SystemExit(f"symmwin build: {problem}")


def prepare_build(setup_args: list[str]) -> None:
    """setup.py's pre-flight, for the command line it was given."""
    stop_if_missing(purpose_of(setup_args))


def _checked(hook_name: str, purpose: str):
    def hook(*args, **kwargs):
        stop_if_missing(purpose)
        from setuptools import build_meta

        return getattr(build_meta, hook_name)(*args, **kwargs)

    hook.__name__ = hook_name
    return hook


# The PEP 517 / PEP 660 hooks, each setuptools' own after the check.
get_requires_for_build_wheel = _checked("get_requires_for_build_wheel", OTHER)
prepare_metadata_for_build_wheel = _checked("prepare_metadata_for_build_wheel", WHEEL_METADATA)
build_wheel = _checked("build_wheel", WHEEL)
get_requires_for_build_editable = _checked("get_requires_for_build_editable", OTHER)
prepare_metadata_for_build_editable = _checked("prepare_metadata_for_build_editable", WHEEL_METADATA)
build_editable = _checked("build_editable", WHEEL)
get_requires_for_build_sdist = _checked("get_requires_for_build_sdist", OTHER)
build_sdist = _checked("build_sdist", OTHER)
