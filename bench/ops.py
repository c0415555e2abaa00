#!/usr/bin/env python3
"""torch.ops.symmwin.* against torch's NVSHMEM ops, NCCL and plain peer copies.

    python3 bench/ops.py --out bench/results_ops      # driver: one job per backend

As in bench/compare.py (whose driver, worker and timing harness in bench/symmbench this
file reuses), a process picks its SymmetricMemory backend once, so the driver starts one
torchrun job per backend:
- SYMMWIN: ``torch.ops.symmwin.all_to_all`` on each engine (sm, copy_engine, auto),
  ``all_to_all_vdev`` with equal splits, ``broadcast`` on each engine, and the MoE
  dispatch / combine (``all_to_all_vdev_2d`` / ``_2d_offset``);
- NVSHMEM: torch's ``nvshmem_all_to_all``, ``all_to_all_vdev``, ``nvshmem_broadcast``
  and the same MoE shapes (16 experts per rank: NVSHMEM's dispatch allows at most 16);
- CUDA (torch's default backend): NCCL ``all_to_all_single``, the plain
  copy-engine push (``copy_`` into the peers' tensors, no synchronisation after it),
  and the floors: an empty kernel and device copies of the bytes the ops move.

Every symmwin / NVSHMEM figure is the complete op: when it returns on the stream the
output is readable. Sizes are per peer, 4 KiB .. 64 MiB; eager and CUDA graph
replay; MoE: 4096 tokens (prefill) and 256 tokens (decode) of 7168 bf16, top-8
routing, 16 experts per rank (and 32 for symmwin alone). Times: CUDA events, warm-up
excluded, median and range over --repeats repeats, each repeat the slowest rank's.
GB/s per rank = bytes that leave the GPU / time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

from symmbench.defaults import size_label
from symmbench.driver import run_jobs
from symmbench.examples import SAFE_ENV
from symmbench.report import med_rng
from symmbench.timing import MODES, iters_for
from symmbench.versions import versions
from symmbench.worker import Job, worker_main

HERE = Path(__file__).resolve().parent
KIB = 1024
MIB = 1024 * KIB
BACKENDS = ["SYMMWIN", "NVSHMEM", "CUDA"]
HIDDEN = 7168
TOPK = 8


class OpsJob(Job):
    """One job of the ops benchmark: symmbench's job (process group, backend, harness)
    with the ops' cases instead of compare.py's."""

    def both_modes(self, kind, impl, size, fn, out_bytes, iters, **extra):
        for mode, graph in MODES:
            self.h.guarded(f"{impl} {size} {mode}", lambda: self.h.record(
                kind, impl, size, mode, self.h.time_gpu(fn, iters, graph), out_bytes, **extra))

    def sym(self, shape, dtype):
        return self.symm_mem.empty(shape, dtype=dtype, device=self.device)

    # -- all-to-all, equal splits ---------------------------------------------

    def a2a_sizes(self):
        torch, W, g = self.torch, self.world, self.group_name
        for kib in self.args.sizes_kib:
            size = kib * KIB
            iters = iters_for(size)
            out_bytes = (W - 1) * size
            if self.backend == "CUDA":
                inp = torch.empty(W * size, dtype=torch.uint8, device=self.device)
                out = torch.empty_like(inp)
                self.both_modes("a2a", "nccl all_to_all_single", size,
                                lambda: self.dist.all_to_all_single(out, inp), out_bytes, iters)
                self.copy_engine_push(size, iters)
                continue
            inp = self.sym((W * size,), torch.uint8)
            out = self.sym((W * size,), torch.uint8)
            if self.backend == "NVSHMEM":
                self.both_modes("a2a", "nvshmem_all_to_all", size,
                                lambda: torch.ops.symm_mem.nvshmem_all_to_all(inp, out, g), out_bytes, iters)
            else:
                import symmwin.ops as ops

                for engine in ("sm", "copy_engine", "auto"):
                    self.both_modes("a2a", f"symmwin.all_to_all {engine}", size,
                                    lambda e=engine: ops.all_to_all_into(inp, out, g, engine=e), out_bytes, iters)
            self.vdev_equal(size, iters)
            self.broadcast(size, iters)
            del inp, out

    def copy_engine_push(self, size, iters):
        """Plain peer copies (``copy_`` into the peers' tensors): the copy engine's
        floor, with nothing that makes the output readable on the peer."""
        torch, W, me = self.torch, self.world, self.rank
        send = torch.empty(W * size, dtype=torch.uint8, device=self.device)
        recv = self.sym((W * size,), torch.uint8)
        hdl = self.symm_mem.rendezvous(recv, self.group)
        peers = [hdl.get_buffer(p, (W * size,), torch.uint8) for p in range(W)]

        def push():
            for p in range(W):
                peers[p][me * size : (me + 1) * size].copy_(send[p * size : (p + 1) * size])

        self.both_modes("a2a", "copy engine peer copy (push only)", size, push, (W - 1) * size, iters)
        self.keep += [recv, hdl]

    def vdev_equal(self, size, iters):
        """all_to_all_vdev with equal splits: rows of 4 KiB (or one row per peer)."""
        torch, W, g = self.torch, self.world, self.group_name
        row = min(size, 4 * KIB)
        rows = size // row
        inp = self.sym((W * rows, row), torch.uint8)
        out = self.sym((W * rows, row), torch.uint8)
        splits = self.sym((W,), torch.int64)
        splits.fill_(rows)
        out_so = self.sym((2, W), torch.int64)
        ns = torch.ops.symm_mem if self.backend == "NVSHMEM" else torch.ops.symmwin
        self.both_modes("a2a", f"{'nvshmem' if self.backend == 'NVSHMEM' else 'symmwin'}.all_to_all_vdev", size,
                        lambda: ns.all_to_all_vdev(inp, out, splits, out_so, g), (W - 1) * size, iters)

    def broadcast(self, size, iters):
        torch, W, g = self.torch, self.world, self.group_name
        buf = self.sym((size,), torch.uint8)
        # Bytes that leave the root for the other ranks.
        out_bytes = (W - 1) * size
        if self.backend == "NVSHMEM":
            self.both_modes("bcast", "nvshmem_broadcast", size,
                            lambda: torch.ops.symm_mem.nvshmem_broadcast(buf, 0, g), out_bytes, iters)
            return
        import symmwin.ops as ops

        for engine in ("sm", "copy_engine"):
            self.both_modes("bcast", f"symmwin.broadcast {engine}", size,
                            lambda e=engine: ops.broadcast_into(buf, 0, g, engine=e), out_bytes, iters)

    # -- MoE dispatch / combine --------------------------------------------------

    def moe(self):
        torch, W, me, g = self.torch, self.world, self.rank, self.group_name
        experts = [16] if self.backend == "NVSHMEM" else [16, 32]
        ns = torch.ops.symm_mem if self.backend == "NVSHMEM" else torch.ops.symmwin
        name = "nvshmem" if self.backend == "NVSHMEM" else "symmwin"
        row_bytes = HIDDEN * 2
        align = 16
        for tokens in (4096, 256):
            for E in experts:
                rng = random.Random(1234 + me)
                counts = [0] * (W * E)
                for _ in range(tokens):
                    for e in rng.sample(range(W * E), TOPK):
                        counts[e] += 1
                sent = tokens * TOPK
                remote = sent - sum(counts[me * E : (me + 1) * E])
                inp = self.sym((sent, HIDDEN), torch.bfloat16)
                out = self.sym((W * sent + E * align, HIDDEN), torch.bfloat16)
                back = self.sym((sent, HIDDEN), torch.bfloat16)
                splits = self.sym((W * E,), torch.int64)
                splits.copy_(torch.tensor(counts))
                out_so = self.sym((2, W * E), torch.int64)
                back_so = self.sym((2, W * E), torch.int64)
                shape = f"{tokens}x{HIDDEN} top{TOPK} E{E}"
                iters = 20 if tokens == 4096 else 100
                self.both_modes("moe", f"{name} dispatch (vdev_2d)", shape,
                                lambda: ns.all_to_all_vdev_2d(inp, out, splits, out_so, g, align),
                                remote * row_bytes, iters)
                ns.all_to_all_vdev_2d(inp, out, splits, out_so, g, align)
                self.both_modes("moe", f"{name} combine (vdev_2d_offset)", shape,
                                lambda: ns.all_to_all_vdev_2d_offset(out, back, out_so, back_so, g),
                                remote * row_bytes, iters)
                del inp, out, back

    # -- floors ----------------------------------------------------------------

    def floors(self):
        """What bounds the ops from below, in the same run: an empty kernel (one
        launch), a 4 KiB device copy (a memcpy node), and device copies of the bytes
        the MoE cases and the largest all-to-all move (the copy floor)."""
        torch = self.torch
        self.both_modes("floor", "empty kernel (torch.cuda._sleep(0))", "-",
                        lambda: torch.cuda._sleep(0), 0, 100)
        sizes = [("4 KiB (memcpy node)", 4 * KIB), ("64 MiB", 64 * MIB)]
        sizes += [(f"MoE {t} tokens ({t * TOPK} rows of {HIDDEN} bf16)", t * TOPK * HIDDEN * 2) for t in (256, 4096)]
        for label, n in sizes:
            src = torch.empty(n, dtype=torch.uint8, device=self.device)
            dst = torch.empty_like(src)
            self.both_modes("floor", "device copy_", label, lambda s=src, d=dst: d.copy_(s), n, iters_for(n))
            del src, dst

    def run(self) -> dict:
        if self.backend != "CUDA":
            self.h.guarded("moe", self.moe)
        else:
            self.h.guarded("floors", self.floors)
        self.a2a_sizes()
        return {"backend": self.backend, "world": self.world, "items": self.h.items,
                "errors": self.h.errors, "versions": versions(self.torch)}


def report(results, out: Path) -> str:
    vers = next((r["versions"] for r in results if r.get("versions")), {})
    world = next((r["world"] for r in results if r.get("world")), "?")
    lines = [
        "# torch.ops.symmwin vs NVSHMEM ops, NCCL and peer copies",
        "",
        f"Machine: {vers.get('gpu', '?')}, driver {vers.get('driver', '?')}; torch {vers.get('torch', '?')}, "
        f"NCCL {vers.get('nccl', '?')}, symmwin {vers.get('symmwin_rev', '?')}; {world} ranks, one per GPU.",
        "",
        "Cells: per-rank GB/s median [min-max] and us/iter median over the repeats (each the slowest rank).",
        "",
    ]
    for kind, title in (("a2a", "All-to-all, by bytes per peer"), ("bcast", "Broadcast, by bytes"),
                        ("moe", "MoE dispatch and combine (7168 bf16 per token, top-8)"),
                        ("floor", "Floors: an empty kernel and device copies (GB/s = bytes copied / time)")):
        items = [(r["backend"], it) for r in results for it in r["items"] if it["kind"] == kind]
        if not items:
            continue
        sizes = list(dict.fromkeys(it["size"] for _, it in items))
        rows = {}
        for backend, it in items:
            rows.setdefault((backend, it["impl"], it["mode"]), {})[it["size"]] = it
        label = [size_label(s) if isinstance(s, int) else s for s in sizes]
        lines += [f"## {title}", "", "| backend | op | mode | " + " | ".join(label) + " |",
                  "| --- | --- | --- | " + " | ".join("---" for _ in sizes) + " |"]
        for (backend, impl, mode), by in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
            cells = []
            for s in sizes:
                it = by.get(s)
                if not it:
                    cells.append("-")
                    continue
                gm, glo, ghi = med_rng(it["gbs"])
                cells.append(f"{gm:.0f} [{glo:.0f}-{ghi:.0f}], {statistics.median(it['us']):.1f} us")
            lines.append(f"| {backend} | {impl} | {mode} | " + " | ".join(cells) + " |")
        lines.append("")
    errs = [(r["backend"], e) for r in results for e in r.get("errors", [])]
    if errs:
        lines += ["## Not measured (errors)", ""] + [f"- {b}: {e['what']}: {e['error']}" for b, e in errs] + [""]
    md = "\n".join(lines)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"results": results}, indent=1))
    return md


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "results_ops"))
    ap.add_argument("--raw", default="")
    ap.add_argument("--backends", nargs="*", default=BACKENDS)
    ap.add_argument("--nproc", type=int, default=0, help="ranks (default: GPUs)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes-kib", type=int, nargs="*", default=[4, 64, 256, 1024, 4096, 16384, 65536])
    ap.add_argument("--port", type=int, default=29711)
    ap.add_argument("--job-timeout", type=int, default=400)
    ap.add_argument("--no-a2a", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--json", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for k, v in SAFE_ENV.items():
        os.environ[k] = v
    if args.worker:
        return worker_main(args, OpsJob)
    if not args.nproc:
        import torch

        args.nproc = max(1, torch.cuda.device_count())
    results = run_jobs(args, Path(__file__))
    print(report(results, Path(args.out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
