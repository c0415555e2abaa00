#!/usr/bin/env python3
"""symmwin's all_to_all on CPU tensors beside gloo and a plain copy, in one run:

    python3 bench/cpu_ops.py --world 2            # and --world 4

Measured at each size per peer:
- ``symmwin.all_to_all``: ``torch.ops.symmwin.all_to_all`` on SYMMWIN_HOST tensors
  (every rank copies every peer's block straight out of its window);
- ``gloo``: ``dist.all_to_all_single`` of plain tensors of the same size;
- ``memcpy``: one thread copying world x size bytes (what each rank's share of the
  all_to_all is), measured in the same processes, the ceiling of a copying op.
Times: wall clock per call, the slowest rank's, median [range] over --repeats
repeats of --iters calls (at least --min-ms per repeat). The bandwidth columns count
what each rank copies (world x size per peer, its own block included) per second.
With more ranks than cores the ranks share cores, and the table says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

SIZES = ["4K", "64K", "1M", "16M"]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--sizes", default=",".join(SIZES), help="bytes per peer, e.g. 4K,1M")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--min-ms", type=float, default=20.0, help="shortest repeat")
    ap.add_argument("--port", type=int, default=29677)
    return ap.parse_args()


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def timed(dist, torch, fn, args) -> list[float]:
    """us per call, the slowest rank's, one value per repeat. Every rank makes the same
    number of calls (a collective op must be called as often on every rank): enough for
    --min-ms on the slowest rank, at least --iters."""
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    per_call_ms = (time.perf_counter() - t0) / 3 * 1e3
    calls = torch.tensor([max(args.iters, int(args.min_ms / max(per_call_ms, 1e-6)) + 1)])
    dist.all_reduce(calls, op=dist.ReduceOp.MAX)
    out = []
    for _ in range(args.repeats):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(int(calls)):
            fn()
        t = torch.tensor([(time.perf_counter() - t0) / int(calls) * 1e6], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append(t.item())
    return out


def worker(rank: int, args, queue) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    import symmwin

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=rank, world_size=args.world)
    symm_mem.set_backend(symmwin.HOST_BACKEND)
    group = dist.group.WORLD.group_name
    W = args.world
    for size in args.sizes:
        n = size // 4 * W
        inp = symm_mem.empty(n, dtype=torch.float32, device="cpu")
        out = symm_mem.empty(n, dtype=torch.float32, device="cpu")
        for t in (inp, out):
            symm_mem.rendezvous(t, dist.group.WORLD)
        inp.fill_(rank)
        plain_in, plain_out = torch.full((n,), float(rank)), torch.zeros(n)
        src, dst = torch.ones(n), torch.zeros(n)
        calls = [
            ("symmwin.all_to_all", lambda: torch.ops.symmwin.all_to_all(inp, out, group)),
            ("gloo all_to_all_single", lambda: dist.all_to_all_single(plain_out, plain_in)),
            ("memcpy (one thread)", lambda: dst.copy_(src)),
        ]
        for name, fn in calls:
            us = timed(dist, torch, fn, args)
            if rank == 0:
                queue.put((size, name, us))
        expect = torch.arange(W, dtype=torch.float32).repeat_interleave(size // 4)
        assert torch.equal(out, expect), "symmwin.all_to_all gave a wrong result"
        del inp, out
    dist.barrier()
    dist.destroy_process_group()


def human(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def main() -> int:
    import torch.multiprocessing as mp

    args = parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(worker, args=(args, queue), nprocs=args.world, start_method="spawn")
    rows: dict[int, dict[str, list[float]]] = {}
    while not queue.empty():
        size, name, us = queue.get()
        rows.setdefault(size, {})[name] = us
    cores = os.cpu_count() or 1
    note = f" ({args.world} ranks on {cores} cores: the ranks share cores)" if args.world > cores else ""
    print(f"world {args.world}{note}; us per call, median [range] over {args.repeats} repeats; "
          f"GB/s: bytes each rank copies (world x size per peer) per second\n")
    names = ["symmwin.all_to_all", "gloo all_to_all_single", "memcpy (one thread)"]
    print("| per peer | " + " | ".join(names) + " | symmwin GB/s | memcpy GB/s | symmwin / memcpy |")
    print("| --- |" + " --- |" * (len(names) + 3))
    for size in sorted(rows):
        cells = []
        for name in names:
            us = rows[size][name]
            cells.append(f"{statistics.median(us):.1f} [{min(us):.1f}-{max(us):.1f}]")
        moved = size * args.world
        gbps = {n: moved / statistics.median(rows[size][n]) / 1e3 for n in (names[0], names[2])}
        ratio = gbps[names[0]] / gbps[names[2]]
        print(f"| {human(size)} | " + " | ".join(cells)
              + f" | {gbps[names[0]]:.1f} | {gbps[names[2]]:.1f} | {ratio:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
