#!/usr/bin/env python3
"""How long each kernel of an op runs on the device, against the smallest kernels torch
launches, at world 1 (no cross-GPU traffic: what is left is each op's fixed cost).

    torchrun --nproc_per_node=1 bench/kernel_times.py

torch.profiler (CUPTI) records every kernel of 250 calls (five rounds of 50), eager and
replayed from a CUDA graph of 50 calls; per op it prints each kernel's duration, the
median [min-max] of the five rounds' medians, and the median gap between consecutive
kernels. The peers in the same run: torch's
`copy_` of 4 KiB (a device-to-device memcpy node) and `torch.cuda._sleep(0)` (an empty
spin kernel), the floor of one launch. The gap is the device's idle time between
kernels; eager, it is the host path of one call.
"""

from __future__ import annotations

import argparse
import random

from symmbench.timing import capture_graph


def build_cases(torch, ops, symm_mem, group):
    def sym(shape, dtype=torch.uint8):
        t = symm_mem.empty(shape, dtype=dtype, device="cuda")
        symm_mem.rendezvous(t, group)
        return t

    cases = {}
    for kib in (4, 65536):
        n = kib * 1024
        a, b = sym((n,)), sym((n,))
        cases[f"all_to_all {kib} KiB"] = lambda a=a, b=b: ops.all_to_all_into(a, b, group)
        row = min(n, 4096)
        rows = n // row
        inp, out = sym((rows, row)), sym((rows, row))
        splits, out_so = sym((1,), torch.int64), sym((2, 1), torch.int64)
        splits.fill_(rows)
        cases[f"vdev {kib} KiB"] = lambda i=inp, o=out, s=splits, so=out_so: torch.ops.symmwin.all_to_all_vdev(
            i, o, s, so, group
        )
    experts, hidden, align, tokens, topk = 16, 7168, 16, 256, 8
    rng = random.Random(1234)
    counts = [0] * experts
    for _ in range(tokens):
        for e in rng.sample(range(experts), topk):
            counts[e] += 1
    sent = tokens * topk
    m_in, m_out = sym((sent, hidden), torch.bfloat16), sym((sent + experts * align, hidden), torch.bfloat16)
    m_splits, m_so = sym((experts,), torch.int64), sym((2, experts), torch.int64)
    m_splits.copy_(torch.tensor(counts))
    cases["moe dispatch 256 tokens"] = lambda: torch.ops.symmwin.all_to_all_vdev_2d(
        m_in, m_out, m_splits, m_so, group, align
    )
    m_back, m_back_so = sym((sent, hidden), torch.bfloat16), sym((2, experts), torch.int64)
    torch.ops.symmwin.all_to_all_vdev_2d(m_in, m_out, m_splits, m_so, group, align)
    cases["moe combine 256 tokens"] = lambda: torch.ops.symmwin.all_to_all_vdev_2d_offset(
        m_out, m_back, m_so, m_back_so, group
    )
    x = torch.empty(4096, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    cases["torch copy_ 4 KiB"] = lambda: y.copy_(x)
    cases["torch.cuda._sleep(0)"] = lambda: torch.cuda._sleep(0)
    return cases


ROUNDS = 5


def median(values):
    return sorted(values)[len(values) // 2]


def kernel_line(torch, prof) -> str:
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ordered = sorted(kernels, key=lambda e: e.time_range.start)
    by_name: dict[str, list[float]] = {}
    for e in ordered:
        by_name.setdefault(e.name, []).append(e.time_range.elapsed_us())
    gaps = sorted(b.time_range.start - a.time_range.end for a, b in zip(ordered, ordered[1:]))
    gap = gaps[len(gaps) // 2] if gaps else 0.0
    parts = []
    for k, v in by_name.items():
        per = max(1, len(v) // ROUNDS)
        rounds = [median(v[i : i + per]) for i in range(0, per * ROUNDS, per) if v[i : i + per]]
        parts.append(f"{k[:40]} x{len(v)} {median(rounds):.2f} [{min(rounds):.2f}-{max(rounds):.2f}] us")
    return f"{', '.join(parts)}; median gap {gap:.2f} us"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=50, help="calls per graph and per eager round")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    from torch.profiler import ProfilerActivity, profile

    import symmwin.ops as ops

    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    symm_mem.set_backend("SYMMWIN")
    group = dist.group.WORLD.group_name
    calls = args.calls
    for name, fn in build_cases(torch, ops, symm_mem, group).items():
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        graph = capture_graph(torch, fn, calls)
        for mode in ("eager", "graph"):
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                for _ in range(ROUNDS):
                    if mode == "graph":
                        graph.replay()
                    else:
                        for _ in range(calls):
                            fn()
                torch.cuda.synchronize()
            print(f"{name} [{mode}]: {kernel_line(torch, prof)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
