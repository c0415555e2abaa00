#!/usr/bin/env python3
"""The cost of a device barrier and of a 4 KiB ``symmwin.all_to_all``, eager and under
CUDA graph replay, on SYMMWIN: the figures a change to the device waits must not move.

    torchrun --nproc_per_node=1 bench/wait_cost.py        # world 1: the fixed cost
    torchrun --nproc_per_node=2 bench/wait_cost.py        # world 2 (may share one GPU)

Every rank uses GPU 0 and a gloo group, so ranks may share a GPU (then the figure is
the GPU's time slice, not the op). --tag names the build, to tell two builds apart in
one log. us per call: median [min-max] over the repeats (each the slowest rank's),
CUDA events, warm-up excluded (symmbench's timing harness).
"""

from __future__ import annotations

import argparse
import os
import statistics

from symmbench.timing import MODES, Harness


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", default="symmwin", help="printed before every line")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    import symmwin.ops as ops

    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    symm_mem.set_backend("SYMMWIN")
    group = dist.group.WORLD
    pad_user = symm_mem.empty(1 << 20, dtype=torch.uint8, device="cuda")
    hdl = symm_mem.rendezvous(pad_user, group)
    inp = symm_mem.empty(world * 4096, dtype=torch.uint8, device="cuda")
    out = symm_mem.empty(world * 4096, dtype=torch.uint8, device="cuda")
    symm_mem.rendezvous(inp, group)
    symm_mem.rendezvous(out, group)
    # Ranks that share a GPU time-slice it (milliseconds per call): fewer calls.
    iters = 200 if world == 1 else 20
    cases = [
        ("barrier", lambda: hdl.barrier(channel=0)),
        ("all_to_all 4 KiB", lambda: ops.all_to_all_into(inp, out, group.group_name)),
    ]
    harness = Harness(args.tag, torch.device("cuda", 0), args.repeats)
    for name, fn in cases:
        for mode, graph in MODES:
            t = harness.time_gpu(fn, iters, graph)
            if dist.get_rank() == 0:
                print(f"{args.tag} world {world} {name} {mode}: "
                      f"median {statistics.median(t):.2f} us [{min(t):.2f}-{max(t):.2f}]", flush=True)
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
