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
import os
import sys

import triton
import triton.language as tl

SAFE_ENV = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}


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
    """(programs per remote peer, local programs), capped by the number of tiles."""
    total = max(1, programs_per_sm * sms)
    tiles = max(1, -(-n // block))
    if world == 1:
        return 0, min(total, tiles)
    local = max(1, total // (8 * (world - 1)))
    remote = max(1, (total - local) // (world - 1))
    return min(remote, tiles), min(local, tiles)


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


def default_env() -> None:
    for k, v in SAFE_ENV.items():
        os.environ[k] = v
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29532")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    os.environ.setdefault("WORLD_SIZE", "1")


def fill_send(send, rank: int, world: int) -> None:
    """send[p, i] = (rank*world + p) * 1000003 + i  (int32, wraps harmlessly)."""
    import torch

    n = send.numel() // world
    idx = torch.arange(n, device=send.device, dtype=torch.int64)
    for p in range(world):
        send.view(world, n)[p].copy_(((rank * world + p) * 1000003 + idx).to(torch.int32))


def check_recv(recv, rank: int, world: int, n: int) -> int:
    """Number of wrong elements in the N x N permutation (slot s must hold chunk rank of s)."""
    import torch

    idx = torch.arange(n, device=recv.device, dtype=torch.int64)
    bad = 0
    for s in range(world):
        want = ((s * world + rank) * 1000003 + idx).to(torch.int32)
        bad += int((recv[s * n : (s + 1) * n] != want).sum())
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elems", type=int, nargs="*", default=[1, 257, 4100, 65536, 1 << 22])
    ap.add_argument("--backend", default="SYMMWIN", help="SYMMWIN, or a torch backend (NCCL, NVSHMEM)")
    ap.add_argument("--bench-mib", type=float, default=16.0, help="chunk size timed at the end (0: none)")
    args = ap.parse_args()

    default_env()
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    if args.backend == "SYMMWIN":
        import symmwin  # noqa: F401  registers SYMMWIN
    if args.backend != "CUDA":  # torch's default; set_backend("CUDA") is refused
        symm_mem.set_backend(args.backend)
    group = dist.group.WORLD
    sms = torch.cuda.get_device_properties().multi_processor_count

    failures = 0
    for n in args.elems:
        send = torch.empty(world * n, dtype=torch.int32, device="cuda")
        recv = symm_mem.empty(world * n, dtype=torch.int32, device="cuda")
        hdl = symm_mem.rendezvous(recv, group)
        fill_send(send, rank, world)
        push = TritonPusher(hdl, send, recv, sms)
        recv.fill_(-1)
        hdl.barrier(channel=0)  # every peer has cleared before anyone pushes
        push()
        hdl.barrier(channel=0)  # every peer's pushes have landed
        torch.cuda.synchronize()
        bad = check_recv(recv, rank, world, n)
        failures += bad != 0
        if rank == 0 or bad:
            print(f"[rank {rank}] triton {n * 4:>10d} B/peer: {'OK' if bad == 0 else f'{bad} WRONG'}", flush=True)
        del hdl, recv, send

    if args.bench_mib > 0 and failures == 0:
        n = int(args.bench_mib * (1 << 20)) // 4
        send = torch.empty(world * n, dtype=torch.int32, device="cuda")
        recv = symm_mem.empty(world * n, dtype=torch.int32, device="cuda")
        hdl = symm_mem.rendezvous(recv, group)
        fill_send(send, rank, world)
        push = TritonPusher(hdl, send, recv, sms)
        for _ in range(3):
            push()
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iters = 20
        start.record()
        for _ in range(iters):
            push()
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1e3 / iters
        if rank == 0:
            gbs = (world - 1) * n * 4 / us / 1e3
            print(f"[rank 0] triton: {args.bench_mib:g} MiB/peer {us:.1f} us/iter, {gbs:.1f} GB/s leaving the GPU", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"[rank {rank}] {failures} check(s) failed", file=sys.stderr)
        return 1
    if rank == 0:
        print("all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
