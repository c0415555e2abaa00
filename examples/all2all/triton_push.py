#!/usr/bin/env python3
"""All-to-all by push over a SYMMWIN window: a Triton kernel over ``buffer_ptrs_dev``.

Same exchange as ``cuda_push.py``: rank ``r`` writes chunk ``p`` of its send buffer
into slot ``r`` of peer ``p``'s receive window. Each program loads its peer's window
address from torch's device pointer array (``hdl.buffer_ptrs_dev``), so the kernel
works over any SymmetricMemory backend that fills that array (``--backend``).

- Programs are sized from the SM count: ``(world-1)`` groups push to the remote
  peers (rank r starts with r+1), a smaller group copies the local chunk.
- Integer arguments are not specialised (``do_not_specialize``), so every rank
  runs the same compiled kernel (rank 1 would otherwise get its own build).
- 16-byte stores: sizes and offsets are passed in 16-byte units and the loaded
  peer pointer is hinted with ``tl.multiple_of``, so Triton emits ``v4`` accesses;
  whole tiles are unmasked, the last one masked. Chunks that are not a multiple of
  16 bytes take an unhinted, element-wise variant (``ALIGNED=False``).

Run::

    torchrun --nproc_per_node=2 examples/all2all/triton_push.py
    python3 examples/all2all/triton_push.py          # one rank, a smoke test
"""

from __future__ import annotations

import argparse
import sys

import triton
import triton.language as tl
from push_harness import check_push, default_env, exchange_buffers, finish, init_group, split_grid, time_push


@triton.jit(do_not_specialize=["ptrs_dev", "dst_off", "n_arg", "rank", "world", "bpp", "local_blocks"])
def push_kernel(
    send_ptr,  # *i32, world chunks of n elements
    ptrs_dev,  # address of the device array of world window base addresses
    dst_off,  # byte offset of the receive tensor in each window (16-byte units if ALIGNED)
    n_arg,  # int32 elements per chunk (groups of 4 if ALIGNED)
    rank,
    world,
    bpp,  # programs per remote peer
    local_blocks,  # programs for the local chunk
    BLOCK: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    pid = tl.program_id(0)
    nremote = (world - 1) * bpp
    if pid < nremote:
        peer = (rank + 1 + pid // bpp) % world
        index = pid % bpp
        count = bpp
    else:
        peer = rank
        index = pid - nremote
        count = local_blocks
    if ALIGNED:
        n = n_arg.to(tl.int64) * 4
        off = dst_off.to(tl.int64) * 16
    else:
        n = n_arg.to(tl.int64)
        off = dst_off.to(tl.int64)
    base = tl.load(ptrs_dev.to(tl.pointer_type(tl.int64)) + peer)
    dst = (base + off + rank.to(tl.int64) * n * 4).to(tl.pointer_type(tl.int32))
    if ALIGNED:
        # Window bases are allocation-aligned; the hint must sit on the pointer
        # (Triton drops it across the integer-to-pointer cast).
        dst = tl.multiple_of(dst, 16)
    src = send_ptr + peer.to(tl.int64) * n
    ntiles = tl.cdiv(n, BLOCK).to(tl.int32)
    for t in range(index, ntiles, count):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        if (t + 1) * BLOCK <= n:
            tl.store(dst + offs, tl.load(src + offs, cache_modifier=".cg"))
        else:
            m = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=m, cache_modifier=".cg"), mask=m)


def grid_split(sms: int, world: int, n: int, block: int, programs_per_sm: int) -> tuple[int, int]:
    """(programs per remote peer, local programs): see `split_grid`."""
    return split_grid(max(1, programs_per_sm * sms), world, max(1, -(-n // block)))


class TritonPusher:
    """One all-to-all push of int32 `send` (world chunks) into the window tensor `recv`."""

    def __init__(self, hdl, send, recv, sms: int, block: int = 4096, num_warps: int = 8, programs_per_sm: int = 2):
        import torch

        world, rank = hdl.world_size, hdl.rank
        assert send.dtype == torch.int32 and recv.dtype == torch.int32
        assert send.is_contiguous() and recv.is_contiguous()
        n = send.numel() // world
        assert recv.numel() >= world * n
        dst_off = hdl.offset + recv.storage_offset() * 4
        aligned = n % 4 == 0 and dst_off % 16 == 0 and send.data_ptr() % 16 == 0
        bpp, local = grid_split(sms, world, n, block, programs_per_sm)
        self.grid = ((world - 1) * bpp + local,)
        self.args = (
            send,
            hdl.buffer_ptrs_dev,
            dst_off // 16 if aligned else dst_off,
            n // 4 if aligned else n,
            rank,
            world,
            bpp,
            local,
        )
        self.meta = dict(BLOCK=block, ALIGNED=aligned, num_warps=num_warps)

    def __call__(self) -> None:
        push_kernel[self.grid](*self.args, **self.meta)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elems", type=int, nargs="*", default=[1, 257, 4100, 65536, 1 << 22])
    ap.add_argument("--backend", default="SYMMWIN", help="SYMMWIN, or a torch backend (NCCL, NVSHMEM)")
    ap.add_argument("--bench-mib", type=float, default=16.0, help="chunk size timed at the end (0: none)")
    args = ap.parse_args()

    default_env(master_port=29532)
    rank, world, group, sms = init_group(args.backend)
    failures = 0
    for n in args.elems:
        send, recv, hdl = exchange_buffers(n, rank, world, group)
        bad = check_push(hdl, TritonPusher(hdl, send, recv, sms), recv, rank, world, n)
        failures += bad != 0
        if rank == 0 or bad:
            print(f"[rank {rank}] triton {n * 4:>10d} B/peer: {'OK' if bad == 0 else f'{bad} WRONG'}", flush=True)
        del hdl, recv, send

    if args.bench_mib > 0 and failures == 0:
        n = int(args.bench_mib * (1 << 20)) // 4
        send, recv, hdl = exchange_buffers(n, rank, world, group)
        us = time_push(TritonPusher(hdl, send, recv, sms))
        if rank == 0:
            gbs = (world - 1) * n * 4 / us / 1e3
            print(f"[rank 0] triton: {args.bench_mib:g} MiB/peer {us:.1f} us/iter, {gbs:.1f} GB/s leaving the GPU", flush=True)
    return finish(rank, failures)


if __name__ == "__main__":
    sys.exit(main())
