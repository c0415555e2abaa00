"""What every backend's job measures besides the all-to-all: memory, allocation, barrier, all-reduce.

Each case takes the job (``worker.Job``) and adds its rows to ``job.h``; the windows
it makes stay alive in ``job.keep`` until the process exits.
"""

from __future__ import annotations

from .defaults import KIB, MIB
from .timing import MODES


def memory(job) -> None:
    """Device memory one 64 MiB window costs (free memory before and after), first and second."""
    torch, symm_mem, h = job.torch, job.symm_mem, job.h
    for which in ("first", "second"):
        job.dist.barrier()
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        t = symm_mem.empty(64 * MIB, dtype=torch.uint8, device=job.device)
        hdl = symm_mem.rendezvous(t, job.group)
        torch.cuda.synchronize()
        free1 = torch.cuda.mem_get_info()[0]
        job.keep += [t, hdl]
        delta = h.slowest([float(free0 - free1)])[0]
        h.items.append({"kind": "memory", "impl": which, "size": 64 * MIB, "bytes": delta})
        h.log(f"memory {which} 64 MiB window: {delta / MIB:.2f} MiB")


def alloc_latency(job) -> None:
    """empty + rendezvous of a fresh window (never a recycled one), 2 and 64 MiB."""
    torch, symm_mem = job.torch, job.symm_mem
    for size in (2 * MIB, 64 * MIB):

        def alloc(size=size):
            t = symm_mem.empty(size, dtype=torch.uint8, device=job.device)
            return t, symm_mem.rendezvous(t, job.group)

        job.h.record("alloc", "empty+rendezvous", size, "host", job.h.time_host(alloc, keep=job.keep))


def barrier(job) -> None:
    torch, symm_mem, h = job.torch, job.symm_mem, job.h
    t = symm_mem.empty(4096, dtype=torch.uint8, device=job.device)
    hdl = symm_mem.rendezvous(t, job.group)
    job.keep += [t, hdl]
    for mode, graph in MODES:
        h.guarded(
            f"barrier {mode}",
            lambda: h.record("barrier", "barrier()", None, mode, h.time_gpu(lambda: hdl.barrier(channel=0), 100, graph)),
        )


ALL_REDUCE_CASES = [("one_shot_all_reduce", n) for n in (8 * KIB, 256 * KIB, 1 * MIB)] + [
    ("two_shot_all_reduce_", n) for n in (1 * MIB, 64 * MIB)
]


def all_reduce(job) -> None:
    """torch's symm_mem one-shot and two-shot all-reduce (bf16 sum), checked, then timed."""
    torch, symm_mem, h = job.torch, job.symm_mem, job.h
    for op, size in ALL_REDUCE_CASES:
        x = symm_mem.empty(size // 2, dtype=torch.bfloat16, device=job.device)
        symm_mem.rendezvous(x, job.group)
        job.keep.append(x)
        call = all_reduce_call(job, op, x)
        if not h.guarded(f"{op} {size} check", check_all_reduce, job, op, x, call):
            continue
        for mode, graph in MODES:
            iters = 50 if size <= MIB else 10
            h.guarded(f"{op} {size} {mode}", lambda: h.record("allreduce", op, size, mode, h.time_gpu(call, iters, graph)))


def all_reduce_call(job, op: str, x):
    ops = job.torch.ops.symm_mem
    if op == "one_shot_all_reduce":
        return lambda: ops.one_shot_all_reduce(x, "sum", job.group_name)
    return lambda: ops.two_shot_all_reduce_(x, "sum", job.group_name)


def check_all_reduce(job, op: str, x, call) -> bool:
    """Every rank contributes rank+1: every element must be the sum 1+..+world."""
    torch = job.torch
    x.fill_(job.rank + 1)
    job.dist.barrier()
    torch.cuda.synchronize()
    out = call()
    out = x if out is None else out
    torch.cuda.synchronize()
    want = job.world * (job.world + 1) / 2
    if not bool((out.float() == want).all()):
        raise RuntimeError(f"{op} gave a wrong sum")
    return True
