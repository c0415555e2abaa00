#!/usr/bin/env python3
"""The all-to-all-v ops across hosts (CPU tensors, gloo), beside what a job without
symmwin would run, in one run:

    python3 bench/spanning.py --world 4 --hosts 2     # one machine; hosts by SYMMWIN_HOST_ID

Each rank sends random splits of rows (MoE-like, 1 KiB rows) to every rank. Measured,
for the ranks on one host and for the same ranks split over ``--hosts`` hosts:
- ``symmwin.all_to_all_vdev``: splits on the "device" (in symmetric memory); across
  hosts the split tables are exchanged, then the rows (local peers through the window,
  the others through gloo);
- ``gloo counts + rows``: what the op replaces: ``all_to_all_single`` of the counts,
  then of the rows (splits known on the host);
- ``gloo capacity``: ``all_to_all_single`` of capacity-sized blocks, no count exchange
  (the alternative to sending splits first: every message as large as the largest).
Times: wall clock per call, the slowest rank's, median and range over --repeats
repeats of --iters calls. Several "hosts" on one machine share its memory bandwidth
and loopback: the figures compare the designs, they are not a network measurement.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

ROW = 1024  # bytes per row (256 float32)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=2, help="hosts the ranks are split over")
    ap.add_argument("--rows", type=int, default=512, help="mean rows a rank sends each rank")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--port", type=int, default=29655)
    return ap.parse_args()


def splits_of(src: int, world: int, mean: int) -> list[int]:
    rng = random.Random(src)
    return [rng.randint(0, 2 * mean) for _ in range(world)]


def timed(dist, torch, fn, repeats: int, iters: int) -> list[float]:
    """us per call, the slowest rank's, one value per repeat."""
    fn()
    out = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        t = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append(t.item())
    return out


def cases(args, rank: int):
    """(name, callable) of every measured call on this rank."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    W, me = args.world, rank
    table = [splits_of(s, W, args.rows) for s in range(W)]
    sent, recv = table[me], [table[s][me] for s in range(W)]
    cap = max(max(sum(t) for t in table), max(sum(t[d] for t in table) for d in range(W)))
    width = ROW // 4
    inp = symm_mem.empty((cap, width), device="cpu")
    out = symm_mem.empty((cap, width), device="cpu")
    in_splits = symm_mem.empty(W, dtype=torch.int64, device="cpu")
    out_so = symm_mem.empty((2, W), dtype=torch.int64, device="cpu")
    in_splits.copy_(torch.tensor(sent))
    inp.fill_(me)
    group = dist.group.WORLD.group_name
    plain_in, plain_out = torch.zeros(sum(sent), width), torch.zeros(sum(recv), width)
    block = max(max(t) for t in table)
    cap_in, cap_out = torch.zeros(W * block, width), torch.zeros(W * block, width)
    counts_in, counts_out = torch.tensor(sent), torch.zeros(W, dtype=torch.int64)

    def counts_and_rows():
        dist.all_to_all_single(counts_out, counts_in)
        dist.all_to_all_single(plain_out, plain_in, counts_out.tolist(), sent)

    return [
        ("symmwin.all_to_all_vdev", lambda: torch.ops.symmwin.all_to_all_vdev(inp, out, in_splits, out_so, group)),
        ("gloo counts + rows", counts_and_rows),
        ("gloo capacity", lambda: dist.all_to_all_single(cap_out, cap_in)),
    ], [inp, out, in_splits, out_so]


def worker(rank: int, args, layout: str, hosts: int, queue) -> None:
    os.environ["SYMMWIN_HOST_ID"] = f"host{rank * hosts // args.world}"
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    import symmwin

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port + hosts}",
                            rank=rank, world_size=args.world)
    symm_mem.set_backend(symmwin.HOST_BACKEND)
    calls, keep = cases(args, rank)
    for t in keep[:2]:
        symm_mem.rendezvous(t, dist.group.WORLD)
    for name, fn in calls:
        us = timed(dist, torch, fn, args.repeats, args.iters)
        if rank == 0:
            queue.put((layout, name, us))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    import torch.multiprocessing as mp

    args = parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    layouts = [("1 host", 1), (f"{args.hosts} hosts", args.hosts)]
    for layout, hosts in layouts:
        mp.start_processes(worker, args=(args, layout, hosts, queue), nprocs=args.world, start_method="spawn")
    rows = {}
    while not queue.empty():
        layout, name, us = queue.get()
        rows.setdefault(name, {})[layout] = us
    print(f"world {args.world}, rows of {ROW} B, about {args.rows} rows per pair; "
          f"us per call, median [range] over {args.repeats} repeats of {args.iters}\n")
    print("| call | " + " | ".join(name for name, _ in layouts) + " |")
    print("| --- |" + " --- |" * len(layouts))
    for name, by_layout in rows.items():
        cells = []
        for layout, _ in layouts:
            us = by_layout.get(layout)
            cells.append(f"{statistics.median(us):.0f} [{min(us):.0f}-{max(us):.0f}]" if us else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
