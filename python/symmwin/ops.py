"""Symmetric-memory ops on symmwin windows: ``torch.ops.symmwin.*``.

The ops have the schemas and the semantics of torch 2.11's NVSHMEM ops
(``torch.ops.symm_mem.*``), so code switches by changing the namespace::

    torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, splits, out_so, group_name)
    torch.ops.symmwin.all_to_all_vdev_2d(inp, out, splits, out_so, group_name)

Tensors come from ``symm_mem.empty`` on ``"SYMMWIN"`` (CUDA) or ``"SYMMWIN_HOST"``
(CPU). Every collective op is complete when it returns on the stream (CPU: when it
returns): the output is readable, the inputs may be reused.

``all_to_all`` and ``broadcast`` return ``Tensor(a!)``, which torch 2.11 cannot
functionalize; ``all_to_all_into`` and ``broadcast_into`` are the same ops returning
nothing, for ``torch.compile``.

Ops whose sizes the host knows (``all_to_all``, ``broadcast``, ``put``, ``get``) run on
an engine: ``"auto"`` (per size: the copy engine from 16 MiB per peer for the
collectives and 4 MiB for put/get, provisional thresholds), ``"sm"`` (kernels) or
``"copy_engine"`` (peer copies, no SM). Choose with ``SYMMWIN_OPS_ENGINE``,
:func:`set_engine`, the :func:`engine` context manager, or the ``engine=`` argument
of the wrappers below. Every rank of a group must use the same engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _C

__all__ = [
    "all_to_all_vdev",
    "all_to_all_vdev_2d",
    "all_to_all_vdev_2d_offset",
    "all_to_all",
    "all_to_all_into",
    "broadcast",
    "broadcast_into",
    "put",
    "get",
    "put_with_signal",
    "wait_for_signal",
    "put_signal",
    "wait_signal",
    "tile_reduce",
    "multi_root_tile_reduce",
    "engine",
    "set_engine",
    "get_engine",
]

# Engine name -> code, from the C header's SYMMWIN_ENGINE_* constants.
_ENGINES: dict[str, int] = _C.engines()
_NAMES = {code: name for name, code in _ENGINES.items()}

_ops = torch.ops.symmwin


def _group_name(group: str | dist.ProcessGroup) -> str:
    return group if isinstance(group, str) else group.group_name


def _boxed(hdl: Any) -> Any:
    # torch's Python handle converts to the TorchBind class the schema names.
    return hdl.boxed() if hasattr(hdl, "boxed") else hdl


def set_engine(name: str) -> None:
    """Set the engine of this thread's host-sized ops.

    Args:
        name: ``"auto"``, ``"sm"``, ``"copy_engine"``, or ``"default"`` (back to
            ``SYMMWIN_OPS_ENGINE``, else auto).
    """
    _ops._set_engine(_engine_code(name))


def _engine_code(name: str) -> int:
    if name not in _ENGINES:
        raise ValueError(f"unknown engine {name!r}; expected one of {sorted(_ENGINES)}")
    return _ENGINES[name]


def get_engine() -> str:
    """Return this thread's engine setting (``"default"`` unless set)."""
    return _NAMES[_ops._get_engine()]


@contextlib.contextmanager
def engine(name: str | None) -> Iterator[None]:
    """Run the enclosed ops on engine ``name`` (``None``: leave the setting alone)."""
    if name is None:
        yield
        return
    before = get_engine()
    set_engine(name)
    try:
        yield
    finally:
        set_engine(before)


def _on_engine(engine: str | None, op: Any, *args: Any) -> Any:
    """``op(*args)`` on ``engine`` (``None``: this thread's setting).

    The eager path sets and restores the thread's engine through ``_C`` directly: the
    torch ops ``_get_engine`` / ``_set_engine`` cost a dispatcher round trip each,
    which on a 4 KiB op was more than the op itself. Under ``torch.compile`` the torch
    ops stay, so the engine setting is part of the traced graph.
    """
    if engine is None:
        return op(*args)
    code = _engine_code(engine)
    if torch.compiler.is_compiling():
        with _engine(engine):
            return op(*args)
    before = _C._swap_engine(code)
    try:
        return op(*args)
    finally:
        _C._swap_engine(before)


def all_to_all_vdev(
    input: torch.Tensor,
    out: torch.Tensor,
    in_splits: torch.Tensor,
    out_splits_offsets: torch.Tensor,
    group_name: str | dist.ProcessGroup,
) -> None:
    """All-to-all with splits on the device (torch's ``symm_mem.all_to_all_vdev``).

    Splits count rows of dim 0. This rank sends ``in_splits[j]`` rows to rank ``j``,
    taken in rank order from the start of ``input``; ``out_splits_offsets[0][i]`` is
    set to the rows received from rank ``i`` and ``out_splits_offsets[1][i]`` to the
    row of ``out`` where they start (the exclusive prefix sum of row 0).

    Args:
        input: symmetric, contiguous, at least 1-D.
        out: symmetric, contiguous, same dtype and dim-0 stride as ``input``.
        in_splits: symmetric int64 ``[world]``.
        out_splits_offsets: symmetric int64 ``[2, world]``, written.
        group_name: the group (name or object).
    """
    _ops.all_to_all_vdev(input, out, in_splits, out_splits_offsets, _group_name(group_name))


def all_to_all_vdev_2d(
    input: torch.Tensor,
    out: torch.Tensor,
    in_splits: torch.Tensor,
    out_splits_offsets: torch.Tensor,
    group_name: str | dist.ProcessGroup,
    major_align: int | None = None,
) -> None:
    """MoE dispatch (torch's ``symm_mem.all_to_all_vdev_2d``).

    With ``E = in_splits.numel() // world`` experts per rank, ``in_splits[r*E + e]``
    rows of ``input`` (rank-major) go to local expert ``e`` of rank ``r``. ``out`` is
    expert-major: for each local expert ``e``, the rows from rank 0, 1, ... in turn;
    ``out_splits_offsets[:, e*world + s]`` is their count and start. Each expert's
    block starts at a multiple of ``major_align`` rows (default 1) and is at least
    ``major_align`` rows long, even when the expert receives nothing.
    """
    _ops.all_to_all_vdev_2d(
        input, out, in_splits, out_splits_offsets, _group_name(group_name), major_align
    )


def all_to_all_vdev_2d_offset(
    input: torch.Tensor,
    out: torch.Tensor,
    in_splits_offsets: torch.Tensor,
    out_splits_offsets: torch.Tensor,
    group_name: str | dist.ProcessGroup,
) -> None:
    """MoE combine (torch's ``symm_mem.all_to_all_vdev_2d_offset``), the inverse of
    :func:`all_to_all_vdev_2d`.

    ``in_splits_offsets`` is int64 ``[2, E*world]`` expert-major: rows and start row
    of the chunk local expert ``e`` returns to rank ``r`` at ``e*world + r`` (padding
    between chunks is allowed and not sent). ``out`` is rank-major and packed:
    ``out_splits_offsets[:, s*E + e]`` is the count and start of the rows expert ``e``
    of rank ``s`` returned.
    """
    _ops.all_to_all_vdev_2d_offset(
        input, out, in_splits_offsets, out_splits_offsets, _group_name(group_name)
    )


def all_to_all(
    input: torch.Tensor,
    out: torch.Tensor,
    group_name: str | dist.ProcessGroup,
    *,
    engine: str | None = None,
) -> torch.Tensor:
    """Equal-split all-to-all (torch's ``symm_mem.nvshmem_all_to_all``); returns ``out``.

    Block ``j`` of ``input`` (``numel / world`` elements) lands at block ``rank`` of
    rank ``j``'s ``out``.
    """
    return _on_engine(engine, _ops.all_to_all, input, out, _group_name(group_name))


def all_to_all_into(
    input: torch.Tensor,
    out: torch.Tensor,
    group_name: str | dist.ProcessGroup,
    *,
    engine: str | None = None,
) -> None:
    """:func:`all_to_all` returning nothing: the form ``torch.compile`` traces."""
    _on_engine(engine, _ops.all_to_all_into, input, out, _group_name(group_name))


def broadcast(
    input: torch.Tensor,
    root: int,
    group_name: str | dist.ProcessGroup,
    *,
    engine: str | None = None,
) -> torch.Tensor:
    """Copy ``root``'s ``input`` into every rank's (torch's ``nvshmem_broadcast``)."""
    return _on_engine(engine, _ops.broadcast, input, root, _group_name(group_name))


def broadcast_into(
    input: torch.Tensor,
    root: int,
    group_name: str | dist.ProcessGroup,
    *,
    engine: str | None = None,
) -> None:
    """:func:`broadcast` returning nothing: the form ``torch.compile`` traces."""
    _on_engine(engine, _ops.broadcast_into, input, root, _group_name(group_name))


def put(tensor: torch.Tensor, peer: int, *, engine: str | None = None) -> None:
    """Copy this rank's ``tensor`` into the same tensor of world rank ``peer``."""
    _on_engine(engine, _ops.put, tensor, peer)


def get(tensor: torch.Tensor, peer: int, *, engine: str | None = None) -> None:
    """Copy world rank ``peer``'s ``tensor`` into this rank's."""
    _on_engine(engine, _ops.get, tensor, peer)


def put_with_signal(tensor: torch.Tensor, sigpad: torch.Tensor, signal: int, peer: int) -> None:
    """Put ``tensor`` to ``peer``, then set ``peer``'s 64-bit ``sigpad`` to ``signal``.

    ``sigpad`` is a view of a signal pad (``hdl.get_signal_pad(rank)``) or a symmetric
    tensor. The data is visible to the peer once it sees the signal.
    """
    _ops.put_with_signal(tensor, sigpad, signal, peer)


def wait_for_signal(sigpad: torch.Tensor, signal: int, peer: int) -> None:
    """Wait until this rank's 64-bit ``sigpad`` equals ``signal`` (sent by ``peer``).

    ``sigpad`` must be symmetric memory of the world group (a symmwin tensor or a
    view of ``hdl.get_signal_pad(rank)``) and ``peer`` a world rank: anything else is
    refused at once rather than waited on until the timeout. Unlike torch's NVSHMEM
    op, the word is reset to zero once seen, so signal pads stay zero at rest and the
    same value can be sent again.
    """
    _ops.wait_for_signal(sigpad, signal, peer)


def put_signal(src: torch.Tensor, hdl: Any, peer: int) -> None:
    """Copy ``src`` into ``peer``'s buffer of ``hdl`` and signal ``peer``.

    The signature of ``torch.distributed._symmetric_memory.put_signal`` (which serves
    only NCCL in torch 2.11). ``src`` may be any tensor on ``hdl``'s device.
    """
    _ops.put_signal(src, _boxed(hdl), peer)


def wait_signal(hdl: Any, peer: int) -> None:
    """Wait for ``peer``'s :func:`put_signal` on ``hdl`` (torch's ``wait_signal``)."""
    _ops.wait_signal(_boxed(hdl), peer)


def tile_reduce(
    in_tile: torch.Tensor,
    out_tile: torch.Tensor,
    root: int,
    group_name: str | dist.ProcessGroup,
    reduce_op: str = "sum",
) -> None:
    """Sum every rank's 2-D ``in_tile`` into ``root``'s ``out_tile``.

    Tiles may be strided views (unit inner stride); ``in_tile`` and ``out_tile`` have
    the same dtype (float32, float64, float16, bfloat16), sizes and strides. Other
    ranks' ``out_tile`` is left alone.
    """
    _ops.tile_reduce(in_tile, out_tile, root, _group_name(group_name), reduce_op)


def multi_root_tile_reduce(
    in_tiles: Sequence[torch.Tensor],
    out_tile: torch.Tensor,
    roots: Sequence[int],
    group_name: str | dist.ProcessGroup,
    reduce_op: str = "sum",
) -> None:
    """Several :func:`tile_reduce` at once: rank ``roots[i]`` gets the sum of every
    rank's ``in_tiles[i]`` in its ``out_tile``. A rank is the root of at most one tile.
    """
    _ops.multi_root_tile_reduce(
        list(in_tiles), out_tile, list(roots), _group_name(group_name), reduce_op
    )


_engine = engine
