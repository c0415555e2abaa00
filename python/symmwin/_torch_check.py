"""Refuses, with one ImportError naming both versions, a torch of another minor
release than the one this build of symmwin was compiled against.

torch's C++ ABI (and its SymmetricMemory interface) changes every minor release, so
the extension built against one minor fails under another with an undefined-symbol
error or worse. This module runs before the extension is loaded, so the user sees what
is wrong and how to fix it instead.
"""

from __future__ import annotations

import re


def _minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def check() -> None:
    try:
        from . import _build_info
    except ImportError:
        # Not built by setup.py (a bare source tree): there is no extension to guard.
        return
    try:
        import torch
    except ImportError:
        return  # symmwin/__init__.py says how to install torch
    running = str(torch.__version__)
    if _minor(running) == tuple(_build_info.TORCH_MINOR):
        return
    built = ".".join(map(str, _build_info.TORCH_MINOR))
    raise ImportError(
        f"symmwin {_build_info.VERSION} was built against torch {_build_info.TORCH_VERSION}, "
        f"but torch {running} is installed: install torch {built} "
        f"(pip install 'torch=={built}.*'), or a symmwin wheel built for torch {running}: "
        "from a source checkout that supports it, with that torch installed, "
        "pip wheel . -w dist --no-build-isolation --no-deps (README, Set-up)"
    )


check()
