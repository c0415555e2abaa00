"""The all-to-all examples of examples/all2all: their kernels, checks and safe environment.

The benchmark runs the examples' own kernels (same source, same build cache) and checks
every row with the examples' own ``check_push``.
"""

from __future__ import annotations

import importlib
import sys

from .defaults import ROOT

EXAMPLES = ROOT / "examples" / "all2all"
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

import push_harness  # noqa: E402  (found through the path entry above)

SAFE_ENV = push_harness.SAFE_ENV


def load_example(name: str):
    """Import examples/all2all/<name>.py; the Triton one needs triton, so only on demand."""
    return importlib.import_module(name)
