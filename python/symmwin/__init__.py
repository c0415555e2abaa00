"""symmwin: symmetric memory windows as a PyTorch SymmetricMemory backend.

Importing this package makes two backends available to
``torch.distributed._symmetric_memory.set_backend``:

- ``"SYMMWIN"`` for CUDA tensors,
- ``"SYMMWIN_HOST"`` for CPU tensors (shared memory between processes of one host).

Nothing is activated on import; select a backend before the first symmetric
allocation::

    import symmwin
    import torch.distributed._symmetric_memory as symm_mem

    symm_mem.set_backend(symmwin.BACKEND)
    t = symm_mem.empty(1024, device="cuda")
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    base, stride = symmwin.flat_layout(hdl)
"""

from __future__ import annotations

import json
from typing import Any

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("symmwin needs PyTorch (tested with 2.11): pip install torch") from e

try:
    from . import _C
except ImportError as e:
    # Usually an extension built against another torch (undefined C++ symbols).
    raise ImportError(
        f"symmwin's extension does not load with torch {torch.__version__} ({e}); "
        "build it against the installed torch: pip install --no-build-isolation ."
    ) from e

__all__ = [
    "BACKEND",
    "HOST_BACKEND",
    "flat_layout",
    "rank_to_global",
    "handle_type",
    "probe",
    "allocation_count",
]

BACKEND = "SYMMWIN"
"""Backend name for CUDA tensors, to pass to ``symm_mem.set_backend``."""

HOST_BACKEND = "SYMMWIN_HOST"
"""Backend name for CPU tensors, to pass to ``symm_mem.set_backend``."""

_C.register()

from . import ops  # noqa: E402  (torch.ops.symmwin itself is registered by _C)
from .ops import put_signal, wait_signal  # noqa: E402  (torch's signatures)


def flat_layout(hdl: Any) -> tuple[int, int]:
    """Return ``(base, stride)`` of a rendezvous handle.

    Every rank's buffer is at ``base + rank * stride`` in this process, so a kernel
    can address peers arithmetically instead of through ``hdl.buffer_ptrs``.

    Args:
        hdl: the object returned by ``symm_mem.rendezvous``.

    Raises:
        ValueError: the handle's buffer pointers are not evenly spaced (only
            possible for handles of other backends).
    """
    return _C.flat_layout(hdl)


def rank_to_global(hdl: Any) -> list[int]:
    """Return the global rank of every group rank of a rendezvous handle.

    torch's Python handle does not expose this table; its device copy is what
    ``get_rank_to_global_rank_dev`` gives kernels.
    """
    return _C.rank_to_global(hdl)


def handle_type(device: int | None = None) -> str:
    """Return the memory handle type symmwin uses on a device.

    Args:
        device: CUDA device index, or -1 for host memory. ``None`` means the current
            CUDA device when CUDA is available, else host memory.

    Returns:
        ``"posix_fd"`` or ``"fabric"`` (as probed, or as configured).
    """
    if device is None:
        device = torch.cuda.current_device() if torch.cuda.is_available() else -1
    return _C.handle_type(device)


def probe() -> dict[str, Any]:
    """Describe this machine as symmwin sees it: devices, handle types, peer access."""
    return json.loads(_C.probe())


def allocation_count() -> int:
    """Return the number of live symmwin allocations in this process (leak checks)."""
    return _C.allocation_count()
