#!/usr/bin/env python3
"""SYMMWIN against torch's own symmetric-memory backends, NCCL and the copy engine.

    python3 bench/compare.py --out bench/results        # driver: one job per backend
    torchrun --nproc_per_node=2 bench/compare.py         # the same (rank 0 drives)

torch lets a process pick its SymmetricMemory backend once, before first use, and its
default "CUDA" backend cannot be selected by name at all. So this file is a driver
that starts one torchrun job per backend (SYMMWIN, CUDA = torch's default, NCCL,
NVSHMEM), each running this file with ``--worker BACKEND`` and writing JSON, and then
merges the jobs into ``results.md``, ``results.json`` and ``results.png``.

What a job measures (2 ranks: one per GPU):
- all-to-all per peer chunk of 256 KiB .. 64 MiB, eager and under CUDA graph replay,
  us/iter and per-rank GB/s = bytes leaving the GPU ((world-1) chunks) / time:
  the CUDA C push kernels of examples/all2all/cuda_push.py (pointer array and flat
  addressing; SIMT and bulk-copy variants, launch shape picked per size by a short
  tuning pass that is not part of the timed repeats), the Triton kernel of
  triton_push.py, a copy-engine push (``copy_`` into peer tensors from
  ``get_buffer``), NCCL ``all_to_all_single`` (CUDA job), and the best CUDA push
  followed by ``hdl.barrier()`` (a complete exchange: the receiver may read after it).
  Every variant is checked element by element before it is timed.
- ``empty`` + ``rendezvous`` latency (2 MiB and 64 MiB windows, fresh each time),
  ``barrier()`` (eager, graph), ``one_shot_all_reduce`` and ``two_shot_all_reduce_``
  (bf16, eager, graph), and device memory per 64 MiB window (``mem_get_info`` delta
  around ``empty`` + ``rendezvous``; first window, which may carry one-time pools,
  and a second one).
Times: CUDA events, warm-up excluded, median and range over --repeats repeats; a
repeat's time is the slowest rank's.

The parts live in bench/symmbench: the driver, the timing harness, the cases and the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from symmbench.defaults import BACKENDS, BENCH
from symmbench.driver import run_jobs
from symmbench.examples import SAFE_ENV
from symmbench.report import report
from symmbench.worker import worker_main


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--raw", default="", help="folder for the per-job JSON (default OUT/raw)")
    ap.add_argument("--backends", nargs="*", default=BACKENDS)
    ap.add_argument("--nproc", type=int, default=0, help="ranks (default: GPUs)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes-kib", type=int, nargs="*", default=[256, 1024, 4096, 16384, 65536])
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--job-timeout", type=int, default=180, help="seconds per job (NCCL, NVSHMEM: at most 75)")
    ap.add_argument("--no-a2a", action="store_true")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--json", default="", help=argparse.SUPPRESS)
    ap.add_argument("--report-only", action="store_true",
                    help="no jobs: redo results.md/png from OUT/results.json (or from --raw)")
    return ap.parse_args()


def saved_results(args) -> tuple[list[dict], str]:
    """(results, date) from OUT/results.json, or from the per-job JSON of --raw (dated now)."""
    out = Path(args.out)
    merged = out / "results.json"
    if merged.exists() and not args.raw:
        data = json.loads(merged.read_text())
        return data["results"], data["date"]
    raw = Path(args.raw) if args.raw else out / "raw"
    return [json.loads((raw / f"{b}.json").read_text()) for b in args.backends if (raw / f"{b}.json").exists()], ""


def main() -> int:
    args = parse_args()
    for k, v in SAFE_ENV.items():
        os.environ[k] = v

    if args.worker:
        return worker_main(args)
    if "RANK" in os.environ and os.environ["RANK"] != "0":
        return 0  # started under torchrun: rank 0 drives, the jobs start their own ranks
    if not args.nproc:
        import torch

        args.nproc = max(1, torch.cuda.device_count())
    if args.report_only:
        results, date = saved_results(args)
    else:
        results, date = run_jobs(args, Path(__file__)), ""
    md = report(results, Path(args.out), date)
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
