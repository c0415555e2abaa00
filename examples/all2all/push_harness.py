"""What both all-to-all examples do around their kernel: start the ranks, fill, check, time.

The exchange is fixed: rank ``r`` sends chunk ``p`` of its send buffer to slot ``r`` of
peer ``p``'s receive window. ``fill_send`` writes a pattern in which every element says
which rank sent it, to whom and at which index, so ``check_recv`` can count every wrong
element of the result. ``bench/compare.py`` checks its rows with the same two functions.

torch is imported inside the functions: importing this module (and the examples'
``--help``) needs no GPU.
"""

from __future__ import annotations

import os
import sys

# Never enable NVLink multicast: torch, NCCL and NVSHMEM would otherwise try it.
SAFE_ENV = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def default_env(master_port: int) -> None:
    """Let a bare `python3 script.py` run as a one-rank job; never enable multicast."""
    for k, v in SAFE_ENV.items():
        os.environ[k] = v
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(master_port))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    os.environ.setdefault("WORLD_SIZE", "1")


def init_group(backend: str):
    """Join the process group and pick the SymmetricMemory backend: (rank, world, group, sms)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    if backend == "SYMMWIN":
        import symmwin  # noqa: F401  registers SYMMWIN
    if backend != "CUDA":  # torch's default; set_backend("CUDA") is refused
        symm_mem.set_backend(backend)
    sms = torch.cuda.get_device_properties().multi_processor_count
    return rank, world, dist.group.WORLD, sms


def split_grid(total: int, world: int, tiles: int) -> tuple[int, int]:
    """(blocks per remote peer, local blocks) out of `total`, none with more blocks than tiles.

    Most blocks push over NVLink; the local chunk copies at HBM speed, so it gets
    about an eighth of what one remote peer gets (at least one block).
    """
    if world == 1:
        return 0, min(total, tiles)
    local = max(1, total // (8 * (world - 1)))
    remote = max(1, (total - local) // (world - 1))
    return min(remote, tiles), min(local, tiles)


def exchange_buffers(n: int, rank: int, world: int, group):
    """(send, recv, hdl): a filled send buffer and a fresh symmetric window, n int32 per peer."""
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    send = torch.empty(world * n, dtype=torch.int32, device="cuda")
    recv = symm_mem.empty(world * n, dtype=torch.int32, device="cuda")
    hdl = symm_mem.rendezvous(recv, group)
    fill_send(send, rank, world)
    return send, recv, hdl


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


def check_push(hdl, push, recv, rank: int, world: int, n: int) -> int:
    """Run `push` once between two barriers on a cleared window: this rank's wrong elements."""
    import torch

    recv.fill_(-1)
    hdl.barrier(channel=0)  # every peer has cleared before anyone pushes
    push()
    hdl.barrier(channel=0)  # every peer's pushes have landed
    torch.cuda.synchronize()
    return check_recv(recv, rank, world, n)


def time_push(push, iters: int = 20) -> float:
    """us per call of `push` on this rank, eager, after three warm-up calls."""
    import torch
    import torch.distributed as dist

    for _ in range(3):
        push()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        push()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def finish(rank: int, failures: int) -> int:
    """Leave the process group and say how the checks went: the exit status."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"[rank {rank}] {failures} check(s) failed", file=sys.stderr)
        return 1
    if rank == 0:
        print("all checks passed", flush=True)
    return 0
