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

from . import _torch_check  # noqa: F401  (first: refuses another torch minor before _C loads)

import atexit
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

# TimeoutError is left out on purpose: `from symmwin import *` must not shadow the
# builtin of that name. Use it as `symmwin.TimeoutError`.
__all__ = [
    "__version__",
    "BACKEND",
    "HOST_BACKEND",
    "flat_layout",
    "direct_peers",
    "world_within_direct_access",
    "rank_to_global",
    "handle_type",
    "probe",
    "allocation_count",
]

BACKEND = "SYMMWIN"
"""Backend name for CUDA tensors, to pass to ``symm_mem.set_backend``."""

HOST_BACKEND = "SYMMWIN_HOST"
"""Backend name for CPU tensors, to pass to ``symm_mem.set_backend``."""

__version__: str = _C.version()
"""The version and the git commit the core was built from, e.g. ``0.1.0+g1a2b3c4d5e6f``."""

# Checks every SYMMWIN_* variable of the README's configuration table (the core's
# config::SETTINGS) and raises here, at import, naming each bad one with its value and
# what is allowed. Nothing is created: the socket directory comes at the first
# rendezvous.
_C.register()

TimeoutError = _C.TimeoutError
"""symmwin's own timeouts: a rendezvous or host-side wait whose peers did not come
in time, and the error reported after a device-side wait timed out. A subclass of
``torch.distributed.DistBackendError`` (itself a ``RuntimeError``). The error torch
raises at a ``synchronize`` after a device trap stays torch's."""


def _release_on_destroy() -> None:
    """Let go of a process group's store when torch destroys the group.

    symmwin holds each group's c10d store for its rendezvous; held past
    ``destroy_process_group`` it would keep the TCPStore's port open (a re-init on that
    port fails) and a new group reusing the name would reach the old store. torch has
    no hook for this, so ``destroy_process_group`` is wrapped.
    """
    import functools

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    destroy = c10d.destroy_process_group
    if getattr(destroy, "_symmwin_wrapped", False):
        return

    @functools.wraps(destroy)
    def destroy_process_group(group=None):
        name = None if group is None or group is dist.GroupMember.WORLD else group.group_name
        try:
            return destroy(group)
        finally:
            _C.release_groups(name)

    destroy_process_group._symmwin_wrapped = True
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group


_release_on_destroy()
# Windows still alive at exit keep their group (and its socket file) alive; the
# sockets must not outlive the process.
atexit.register(_C.remove_sockets)

from . import ops  # noqa: E402  (torch.ops.symmwin itself is registered by _C)
from .ops import put_signal, wait_signal  # noqa: E402  (torch's signatures)
from . import _autoload  # noqa: E402

# SYMMWIN_AUTOLOAD=1 (docs/clients.md): this import, which torch's `torch.backends`
# entry point makes at the end of `import torch`, selects the backends.
if _autoload.requested():
    _autoload.select(BACKEND, HOST_BACKEND)


def flat_layout(hdl: Any) -> tuple[int, int]:
    """Return ``(base, stride)`` of a rendezvous handle.

    Rank ``r``'s slot of the window's span is at ``base + r * stride`` in this
    process, so a kernel can address peers arithmetically instead of through
    ``hdl.buffer_ptrs``. For a peer the slot is ``hdl.buffer_ptrs[r]``. This rank's own
    slot is a second mapping of its own memory, whose first address is
    ``hdl.buffer_ptrs[hdl.rank]`` (the allocation, as torch's backends report it: add
    ``hdl.offset`` for the tensor). Both show the same bytes; inside one CUDA kernel,
    reach the own memory through one of them only (two addresses of one page have no
    L1 coherence promise within a kernel).

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


def handle_type(device: int | str | torch.device | None = None) -> str:
    """Return the memory handle type symmwin uses on a device.

    Args:
        device: a ``torch.device`` (or its string, ``"cuda:1"``, ``"cpu"``), a CUDA
            device index, or -1 for host memory. ``None`` means the current CUDA
            device when CUDA is available, else host memory.

    Returns:
        ``"posix_fd"`` or ``"fabric"`` (as probed, or as configured).
    """
    if device is None:
        device = torch.cuda.current_device() if torch.cuda.is_available() else -1
    elif not isinstance(device, int):
        device = torch.device(device)
        if device.type == "cpu":
            device = -1
        elif device.type == "cuda":
            device = device.index if device.index is not None else torch.cuda.current_device()
        else:
            raise ValueError(f"symmwin: no memory for device type {device.type!r} (cuda or cpu)")
    return _C.handle_type(device)


def probe() -> dict[str, Any]:
    """Describe this machine as symmwin sees it: devices, handle types, peer access."""
    return json.loads(_C.probe())


def allocation_count() -> int:
    """Return the number of live symmwin allocations in this process (leak checks)."""
    return _C.allocation_count()


def direct_peers(hdl: Any) -> list[int]:
    """Return the ranks whose memory a rendezvous handle maps, in rank order.

    On one host every rank is listed. In a group that spans hosts only the ranks this
    process can load from and store to are (its own always): for the others
    ``hdl.buffer_ptrs[r]`` and ``hdl.signal_pad_ptrs[r]`` are 0 and they are reached
    through the group's process group (see docs/multi-node.md).
    """
    return _C.direct_peers(hdl)


def world_within_direct_access(hdl: Any) -> bool:
    """Return True when a handle maps every rank of its group (torch's
    ``world_within_direct_access()``, which torch's Python handle does not expose)."""
    return _C.world_within_direct_access(hdl)
