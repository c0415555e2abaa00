#!/usr/bin/env python3
"""``symm_mem.empty`` + ``rendezvous`` latency, SYMMWIN beside torch's own backends.

    python3 bench/rendezvous.py --out /tmp/rdv                     # worlds 2, 4, 8
    python3 bench/rendezvous.py --worlds 2 --backends SYMMWIN CUDA --sizes-mib 2 64

The driver starts one job per (world, backend), one after another, each a ``torchrun``
of this file with ``--worker BACKEND``: torch lets a process pick its SymmetricMemory
backend once, and its default "CUDA" backend cannot be picked by name. Ranks share the
GPUs round-robin when the world is larger than the number of GPUs; rendezvous is host
work (driver calls, store, sockets), so several ranks per GPU measure it fairly as long
as every backend runs the same way. NCCL refuses two ranks on one GPU, so the process
group is gloo whenever ranks share a GPU (the c10d store is the same either way).

Every job runs with ``TORCH_SYMMMEM_IMPLICIT_POOL=0``: with torch's implicit MemPool a
freed tensor goes back to the pool with its rendezvous cached, so a "re-allocation"
would never reach the backend. Two figures per size:

- fresh: ``empty`` + ``rendezvous`` of a new allocation while the earlier ones stay
  alive, so no backend can hand back freed memory;
- realloc: the same right after the previous allocation of that size was freed
  (tensor and handle deleted, freed by reference count) on every rank. No
  ``gc.collect()`` between the calls: walking every Python object leaves the caches
  cold, which added 0.4 ms to a 0.2 ms re-allocation on CPU tensors.

Host time from before ``empty`` to after ``torch.cuda.synchronize()``, per iteration the
slowest rank's; one warm-up iteration per size and figure is left out; the table shows
median [min-max] in ms. Results go to ``--out``: ``rendezvous.json``,
``rendezvous.md`` and one log per job.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

SAFE_ENV = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_SYMMMEM_IMPLICIT_POOL": "0",
}
BACKENDS = ["SYMMWIN", "CUDA", "NVSHMEM"]
MIB = 1 << 20


# --------------------------------------------------------------------------- worker


def worker(args) -> int:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    on_cpu = args.device == "cpu"
    gpus = 0 if on_cpu else torch.cuda.device_count()
    if on_cpu:
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % gpus)
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
    if on_cpu or world > gpus:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=device)
    if args.worker == "SYMMWIN":
        import symmwin  # registers SYMMWIN and its host twin

        symm_mem.set_backend(symmwin.HOST_BACKEND if on_cpu else args.worker)
    elif args.worker != "CUDA":
        symm_mem.set_backend(args.worker)
    group = dist.group.WORLD.group_name
    result = {"backend": args.worker, "world": world, "gpus": gpus, "rows": [], "errors": []}

    def one(size: int) -> tuple[float, object, object]:
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        t = symm_mem.empty(size, dtype=torch.uint8, device=device)
        hdl = symm_mem.rendezvous(t, group)
        sync()
        return (time.perf_counter() - t0) * 1e3, t, hdl

    def slowest(ms: list[float]) -> list[float]:
        every = [None] * world
        dist.all_gather_object(every, ms)
        return [max(column) for column in zip(*every)]

    for size in (s * MIB for s in args.sizes_mib):
        for mode in ("fresh", "realloc"):
            try:
                ms, keep = [], []
                gc.collect()
                for _ in range(args.repeats + 1):
                    dt, t, hdl = one(size)
                    ms.append(dt)
                    if mode == "fresh":
                        keep.append((t, hdl))
                    else:
                        # Freed by reference count, as a program's tensors are. A
                        # gc.collect() here (tens of ms over every Python object) would
                        # leave the caches cold and add 0.1-0.3 ms to the next call.
                        del t, hdl
                        sync()
                del keep
                gc.collect()
                sync()
                result["rows"].append({"size": size, "mode": mode, "ms": slowest(ms[1:])})
            except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop
                result["errors"].append({"size": size, "mode": mode, "error": f"{type(e).__name__}: {e}"[:300]})
                if rank == 0:
                    print(f"[{args.worker}] {size >> 20} MiB {mode}: FAILED {e}", flush=True)
                gc.collect()
            dist.barrier()
    if rank == 0:
        Path(args.json).write_text(json.dumps(result, indent=1))
    dist.barrier()
    # Windows stay alive until the process exits (torch's registries outlive ours).
    dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------- driver


def run_job(args, world: int, backend: str, port: int, out: Path) -> dict:
    js = out / f"raw-{backend}-w{world}.json"
    js.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                          "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env.update(SAFE_ENV)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if backend == "CUDA":
        # torch's own knob (its tests set it too): without it, its backend refuses ranks
        # that share a GPU ("detected allocations from overlapping devices").
        env.setdefault("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")
    if backend == "NVSHMEM":
        # The fresh figure keeps repeats + 1 windows of the largest size alive.
        heap = (args.repeats + 2) * max(args.sizes_mib) + 1024
        env.setdefault("NVSHMEM_SYMMETRIC_SIZE", f"{heap}M")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", f"--master_port={port}",
           str(Path(__file__).resolve()), "--worker", backend, "--json", str(js), "--repeats", str(args.repeats),
           "--sizes-mib", *map(str, args.sizes_mib), "--device", args.device]
    t0 = time.time()
    limit = args.job_timeout if backend != "NVSHMEM" else min(args.job_timeout, 60)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        text, _ = p.communicate(timeout=limit)
        rc: object = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        rc = f"timeout after {limit} s"
    (out / f"{backend}-w{world}.log").write_text(text)
    print(f"== {backend} world {world}: rc={rc} in {time.time() - t0:.0f} s", flush=True)
    if js.exists():
        r = json.loads(js.read_text())
    else:
        tail = " | ".join(text.strip().splitlines()[-3:])[-300:]
        r = {"backend": backend, "world": world, "rows": [], "errors": [{"error": f"rc={rc}: {tail}"}]}
    r["rc"] = rc
    return r


def cell(ms: list[float] | None) -> str:
    if not ms:
        return "-"
    return f"{statistics.median(ms):.3f} [{min(ms):.3f}-{max(ms):.3f}]"


def report(results: list[dict], backends: list[str]) -> str:
    found = {(r["world"], r["backend"], row["size"], row["mode"]): row["ms"] for r in results for row in r["rows"]}
    keys = sorted({(w, s, m) for (w, _, s, m) in found}, key=lambda k: (k[0], k[1], k[2] != "fresh"))
    lines = ["| world | size | figure | " + " | ".join(backends) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in backends) + " |"]
    for w, s, m in keys:
        size = f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB"
        lines.append(f"| {w} | {size} | {m} | " + " | ".join(cell(found.get((w, b, s, m))) for b in backends) + " |")
    errors = [f"- {r['backend']} world {r['world']}: {e.get('size', 0) >> 20 or ''} {e.get('mode', '')} {e['error']}"
              for r in results for e in r["errors"]]
    note = ("\nms, median [min-max] of the slowest rank per iteration; TORCH_SYMMMEM_IMPLICIT_POOL=0; "
            "fresh = earlier windows kept alive, realloc = right after freeing one of the same size.\n")
    return "\n".join(lines) + note + ("\nErrors:\n" + "\n".join(errors) + "\n" if errors else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=BACKENDS + ["NCCL"], help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS + ["NCCL"])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[2, 64, 1024])
    ap.add_argument("--repeats", type=int, default=7, help="timed iterations per size and figure")
    ap.add_argument("--job-timeout", type=int, default=120, help="seconds per job")
    ap.add_argument("--port", type=int, default=29620)
    ap.add_argument("--out", default="bench/results/rendezvous")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: SYMMWIN's host twin only, to check the script on a machine without a GPU")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = 0
    if args.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    results = []
    for i, (world, backend) in enumerate((w, b) for w in args.worlds for b in args.backends):
        if backend == "NVSHMEM" and world > max(2, gpus):
            # One PE per GPU is what NVSHMEM is built for; it is tried once with ranks
            # sharing a GPU (world 2), not at every world, so a hang costs one timeout.
            results.append({"backend": backend, "world": world, "rows": [], "rc": "skipped",
                            "errors": [{"error": f"skipped: {world} ranks on {gpus} GPU(s)"}]})
            continue
        results.append(run_job(args, world, backend, args.port + i, out))
    (out / "rendezvous.json").write_text(json.dumps(results, indent=1))
    text = report(results, args.backends)
    (out / "rendezvous.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
