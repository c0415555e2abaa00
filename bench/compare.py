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
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "examples" / "all2all"
SAFE_ENV = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}
BACKENDS = ["SYMMWIN", "CUDA", "NCCL", "NVSHMEM"]
KIB = 1024
MIB = 1024 * KIB


def load_example(name: str):
    """Import examples/all2all/<name>.py (same kernels as the examples, same build cache)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- worker


class Worker:
    def __init__(self, args):
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.torch, self.dist, self.symm_mem = torch, dist, symm_mem
        self.args = args
        self.backend = args.worker
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", self.rank)))
        self.device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl", device_id=self.device)
        if self.backend == "SYMMWIN":
            import symmwin  # noqa: F401  registers SYMMWIN

        if self.backend != "CUDA":
            symm_mem.set_backend(self.backend)
        self.group = dist.group.WORLD
        self.group_name = self.group.group_name
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.items: list[dict] = []
        self.errors: list[dict] = []
        self.keep: list = []
        dist.barrier()

    # -- helpers -------------------------------------------------------------

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[{self.backend}] {msg}", flush=True)

    def guarded(self, what: str, fn, *a, **kw):
        """Run one measurement; record an error instead of ending the job."""
        try:
            return fn(*a, **kw)
        except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.errors.append({"what": what, "error": msg})
            if self.rank == 0:
                print(f"[{self.backend}] {what}: FAILED {msg}", flush=True)
                traceback.print_exc()
            self.torch.cuda.synchronize()
            self.dist.barrier()
            return None

    def slowest(self, values: list[float]) -> list[float]:
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def time_gpu(self, fn, iters: int, graph: bool, repeats: int | None = None) -> list[float]:
        """us per call of fn, one value per repeat (slowest rank), warm-up excluded."""
        torch = self.torch
        repeats = repeats or self.args.repeats
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        if graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(iters):
                    fn()
            g.replay()
            torch.cuda.synchronize()
            run = g.replay
        else:

            def run():
                for _ in range(iters):
                    fn()

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeats):
            self.dist.barrier()
            torch.cuda.synchronize()
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / iters)
        if graph:
            del g
        return self.slowest(times)

    def record(self, kind: str, impl: str, size: int | None, mode: str, us: list[float], **extra) -> dict:
        item = {"kind": kind, "impl": impl, "size": size, "mode": mode, "us": us, **extra}
        med = statistics.median(us)
        if kind == "a2a":
            out_bytes = (self.world - 1) * size
            item["gbs"] = [out_bytes / t / 1e3 for t in us]
            extra_s = f" {out_bytes / med / 1e3:7.1f} GB/s"
        else:
            extra_s = ""
        self.items.append(item)
        self.log(
            f"{kind:10s} {impl:22s} {size if size is not None else '':>10} {mode:5s} "
            f"{med:9.2f} us [{min(us):.2f}-{max(us):.2f}]{extra_s} {extra.get('config', '')}"
        )
        return item

    @staticmethod
    def iters_for(size_bytes: int) -> int:
        est_us = 3.0 + size_bytes / 300e3
        return int(min(200, max(8, 4000 / est_us)))

    # -- measurements --------------------------------------------------------

    def memory(self) -> None:
        torch, symm_mem = self.torch, self.symm_mem
        for which in ("first", "second"):
            self.dist.barrier()
            torch.cuda.synchronize()
            free0 = torch.cuda.mem_get_info()[0]
            t = symm_mem.empty(64 * MIB, dtype=torch.uint8, device=self.device)
            hdl = symm_mem.rendezvous(t, self.group)
            torch.cuda.synchronize()
            free1 = torch.cuda.mem_get_info()[0]
            self.keep += [t, hdl]
            delta = self.slowest([float(free0 - free1)])[0]
            self.items.append({"kind": "memory", "impl": which, "size": 64 * MIB, "bytes": delta})
            self.log(f"memory {which} 64 MiB window: {delta / MIB:.2f} MiB")

    def alloc_latency(self) -> None:
        torch, symm_mem = self.torch, self.symm_mem
        for size in (2 * MIB, 64 * MIB):
            ts = []
            for _ in range(self.args.repeats):
                self.dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                t = symm_mem.empty(size, dtype=torch.uint8, device=self.device)
                hdl = symm_mem.rendezvous(t, self.group)
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e6)
                self.keep += [t, hdl]  # fresh allocations: no recycled rendezvous
            self.record("alloc", "empty+rendezvous", size, "host", self.slowest(ts))

    def barrier(self) -> None:
        torch, symm_mem = self.torch, self.symm_mem
        t = symm_mem.empty(4096, dtype=torch.uint8, device=self.device)
        hdl = symm_mem.rendezvous(t, self.group)
        self.keep += [t, hdl]
        for graph in (False, True):
            mode = "graph" if graph else "eager"
            self.guarded(
                f"barrier {mode}",
                lambda: self.record("barrier", "barrier()", None, mode, self.time_gpu(lambda: hdl.barrier(channel=0), 100, graph)),
            )

    def all_reduce(self) -> None:
        torch, symm_mem = self.torch, self.symm_mem
        ops = torch.ops.symm_mem
        cases = [("one_shot_all_reduce", n) for n in (8 * KIB, 256 * KIB, 1 * MIB)] + [
            ("two_shot_all_reduce_", n) for n in (1 * MIB, 64 * MIB)
        ]
        for op, size in cases:
            x = symm_mem.empty(size // 2, dtype=torch.bfloat16, device=self.device)
            symm_mem.rendezvous(x, self.group)
            self.keep.append(x)

            def call(op=op, x=x):
                if op == "one_shot_all_reduce":
                    return ops.one_shot_all_reduce(x, "sum", self.group_name)
                return ops.two_shot_all_reduce_(x, "sum", self.group_name)

            def check(op=op, x=x, call=call):
                x.fill_(self.rank + 1)
                self.dist.barrier()
                torch.cuda.synchronize()
                out = call()
                out = x if out is None else out
                torch.cuda.synchronize()
                want = self.world * (self.world + 1) / 2
                ok = bool((out.float() == want).all())
                if not ok:
                    raise RuntimeError(f"{op} gave a wrong sum")
                return True

            if not self.guarded(f"{op} {size} check", check):
                continue
            for graph in (False, True):
                mode = "graph" if graph else "eager"
                iters = 50 if size <= MIB else 10
                self.guarded(
                    f"{op} {size} {mode}",
                    lambda: self.record("allreduce", op, size, mode, self.time_gpu(call, iters, graph)),
                )

    # -- all-to-all ----------------------------------------------------------

    def a2a_setup(self):
        torch, symm_mem = self.torch, self.symm_mem
        max_n = max(self.args.sizes_kib) * KIB // 4
        self.send = torch.empty(self.world * max_n, dtype=torch.int32, device=self.device)
        self.win = symm_mem.empty(self.world * max_n, dtype=torch.int32, device=self.device)
        self.hdl = symm_mem.rendezvous(self.win, self.group)
        self.keep += [self.win, self.hdl]
        self.cp = load_example("cuda_push")
        self.tp = load_example("triton_push")
        self.mod = self.cp.build(self.rank, world_barrier=self.dist.barrier)
        return True

    def views(self, n: int):
        send = self.send[: self.world * n]
        recv = self.win[: self.world * n]
        self.cp.fill_send(send, self.rank, self.world)
        return send, recv

    def verify(self, what: str, fn, recv, n: int) -> None:
        recv.fill_(-1)
        self.hdl.barrier(channel=0)  # everyone has cleared before anyone pushes
        fn()
        self.hdl.barrier(channel=0)  # everyone's pushes have landed
        self.torch.cuda.synchronize()
        bad = self.cp.check_recv(recv, self.rank, self.world, n)
        bad = int(self.slowest([float(bad)])[0])
        if bad:
            raise RuntimeError(f"{what}: {bad} wrong elements")

    def tune(self, make, configs, size: int, graph: bool):
        """Pick the config with the lowest time (slowest rank); not part of the results."""
        best, best_us = None, float("inf")
        iters = max(4, self.iters_for(size) // 4)
        for cfg in configs:
            try:
                us = statistics.median(self.time_gpu(make(cfg), iters, graph, repeats=2))
            except Exception as e:  # noqa: BLE001
                self.log(f"tune {cfg}: {type(e).__name__}: {e}")
                self.torch.cuda.synchronize()
                continue
            if us < best_us:
                best, best_us = cfg, us
        return best

    def a2a(self) -> None:
        torch, dist = self.torch, self.dist
        cp, tp = self.cp, self.tp
        Config = cp.Config
        simt = [
            Config("simt", 1, 1024, 4),
            Config("simt", 1, 512, 8),
            Config("simt", 2, 512, 4),
            Config("simt", 2, 512, 8),
            Config("simt", 4, 256, 4),
            Config("simt", 4, 256, 8),
            Config("simt", 4, 256, 2),
            Config("simt", 8, 128, 2),
            Config("simt", 4, 256, 1),
            # Programmatic dependent launch: the next kernel's launch overlaps this one.
            Config("simt", 2, 512, 8, pdl=True),
            Config("simt", 2, 512, 4, pdl=True),
            Config("simt", 4, 256, 4, pdl=True),
            Config("simt", 4, 256, 2, pdl=True),
            Config("simt", 8, 128, 2, pdl=True),
        ]
        tma = [
            Config("tma", 1, tile=32 * KIB, stages=4),
            Config("tma", 2, tile=16 * KIB, stages=4),
            Config("tma", 4, tile=8 * KIB, stages=4),
            Config("tma", 2, tile=32 * KIB, stages=2),
            Config("tma", 8, tile=4 * KIB, stages=4),
        ]
        triton_cfgs = [(4096, 8, 2), (2048, 4, 4), (8192, 8, 1)]
        flat_modes = [False, True] if self.backend == "SYMMWIN" else [False]
        for size_kib in self.args.sizes_kib:
            size = size_kib * KIB
            n = size // 4
            send, recv = self.views(n)
            iters = self.iters_for(size)
            for graph in (False, True):
                mode = "graph" if graph else "eager"

                # CUDA C push, pointer array / flat, SIMT / bulk copy.
                for flat in flat_modes:
                    for family, cfgs in (("simt", simt), ("tma", tma)):
                        impl = f"cuda {family} {'flat' if flat else 'ptrs'}"

                        def make(cfg, flat=flat):
                            return cp.Pusher(self.mod, self.hdl, send, recv, flat, cfg, self.sms)

                        def run(impl=impl, cfgs=cfgs, make=make):
                            cfg = self.tune(make, cfgs, size, graph)
                            if cfg is None:
                                raise RuntimeError("no config ran")
                            push = make(cfg)
                            self.verify(f"{impl} {cfg.label()}", push, recv, n)
                            self.record("a2a", impl, size, mode, self.time_gpu(push, iters, graph), config=cfg.label())
                            return cfg

                        cfg = self.guarded(f"{impl} {size} {mode}", run)
                        if family == "simt" and not flat and cfg is not None:
                            push = make(cfg)
                            hdl = self.hdl

                            def push_barrier(push=push, hdl=hdl):
                                push()
                                hdl.barrier(channel=0)

                            self.guarded(
                                f"cuda+barrier {size} {mode}",
                                lambda: self.record(
                                    "a2a", "cuda simt ptrs+barrier", size, mode,
                                    self.time_gpu(push_barrier, iters, graph), config=cfg.label(),
                                ),
                            )

                # Triton over buffer_ptrs_dev.
                def run_triton():
                    def make(c):
                        return tp.TritonPusher(self.hdl, send, recv, self.sms, block=c[0], num_warps=c[1], programs_per_sm=c[2])

                    c = self.tune(make, triton_cfgs, size, graph)
                    if c is None:
                        raise RuntimeError("no config ran")
                    push = make(c)
                    self.verify("triton", push, recv, n)
                    self.record("a2a", "triton ptrs", size, mode, self.time_gpu(push, iters, graph),
                                config=f"B{c[0]} w{c[1]} p{c[2]}")

                self.guarded(f"triton {size} {mode}", run_triton)

                # Copy engine: copy_ into the peers' windows (get_buffer views); the
                # local chunk on a second stream, overlapping the remote copies.
                def run_ce():
                    elem_off = (self.hdl.offset + recv.storage_offset() * 4) // 4
                    dsts, srcs = [], []
                    order = [(self.rank + 1 + j) % self.world for j in range(self.world)]
                    for p in order:
                        peer = self.hdl.get_buffer(p, (self.world * n,), torch.int32, elem_off)
                        dsts.append(peer[self.rank * n : (self.rank + 1) * n])
                        srcs.append(send[p * n : (p + 1) * n])
                    side = torch.cuda.Stream()

                    def ce():
                        cur = torch.cuda.current_stream()
                        side.wait_stream(cur)
                        for d, s in zip(dsts[:-1], srcs[:-1]):
                            d.copy_(s)
                        with torch.cuda.stream(side):
                            dsts[-1].copy_(srcs[-1])
                        cur.wait_stream(side)

                    self.verify("copy engine", ce, recv, n)
                    self.record("a2a", "copy engine", size, mode, self.time_gpu(ce, iters, graph))

                self.guarded(f"copy engine {size} {mode}", run_ce)

                # NCCL all_to_all_single (independent of the symmetric backend).
                if self.backend == "CUDA":
                    out = torch.empty_like(send)

                    def nccl(out=out, send=send):
                        dist.all_to_all_single(out, send)

                    def run_nccl(out=out, nccl=nccl):
                        out.fill_(-1)
                        nccl()
                        torch.cuda.synchronize()
                        bad = int(self.slowest([float(cp.check_recv(out, self.rank, self.world, n))])[0])
                        if bad:
                            raise RuntimeError(f"all_to_all_single: {bad} wrong elements")
                        self.record("a2a", "nccl all_to_all_single", size, mode, self.time_gpu(nccl, iters, graph))

                    self.guarded(f"nccl {size} {mode}", run_nccl)

    def floor(self) -> None:
        """An empty kernel launched like the push kernel: the launch floor."""
        for pdl in (0, 1):
            for graph in (False, True):
                mode = "graph" if graph else "eager"
                self.guarded(
                    f"empty kernel {mode}",
                    lambda: self.record("latency", "empty kernel" + (" pdl" if pdl else ""), None, mode,
                                        self.time_gpu(lambda: self.mod.empty(pdl), 200, graph)),
                )

    def one_direction(self) -> None:
        """Only rank 0 pushes: what one direction of the link carries alone."""
        cfg = self.cp.Config("simt", 2, 512, 8)
        for size_kib in (16384, 65536):
            if size_kib not in self.args.sizes_kib:
                continue
            n = size_kib * KIB // 4
            send, recv = self.views(n)
            push = self.cp.Pusher(self.mod, self.hdl, send, recv, False, cfg, self.sms)
            fn = push if self.rank == 0 else (lambda: None)
            self.guarded(
                f"one direction {size_kib}",
                lambda: self.record("a2a", "cuda simt ptrs, rank 0 only", size_kib * KIB, "graph",
                                    self.time_gpu(fn, self.iters_for(size_kib * KIB), True), config=cfg.label()),
            )

    def run(self) -> dict:
        self.guarded("memory", self.memory)
        self.guarded("alloc", self.alloc_latency)
        self.guarded("barrier", self.barrier)
        self.guarded("allreduce", self.all_reduce)
        if self.backend in ("SYMMWIN", "CUDA") and not self.args.no_a2a:
            if self.guarded("a2a setup", self.a2a_setup):
                self.a2a()
                if self.backend == "SYMMWIN":
                    self.floor()
                    self.guarded("one direction", self.one_direction)
        return {
            "backend": self.backend,
            "world": self.world,
            "items": self.items,
            "errors": self.errors,
            "versions": versions(self.torch),
        }


def versions(torch) -> dict:
    v = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }
    try:
        import triton

        v["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        v["gpu"] = f"{torch.cuda.device_count()}x {p.name} ({p.multi_processor_count} SMs)"
    try:
        v["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.split()[0]
    except Exception:  # noqa: BLE001
        pass
    try:
        # The commit the installed core was built from (what actually ran); the
        # checkout's HEAD only where no symmwin is installed.
        import symmwin

        v["symmwin_rev"] = symmwin.__version__
    except ImportError:
        v["symmwin_rev"] = "unknown"
    if v["symmwin_rev"] == "unknown":
        try:
            v["symmwin_rev"] = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip() or "unknown"
        except Exception:  # noqa: BLE001
            pass
    return v


def worker_main(args) -> int:
    w = Worker(args)
    result = w.run()
    if w.rank == 0:
        Path(args.json).write_text(json.dumps(result, indent=1))
    w.torch.cuda.synchronize()
    w.dist.barrier()
    # Windows stay alive until the process exits (torch's registries outlive ours).
    w.dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------- driver


def run_jobs(args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = Path(args.raw) if args.raw else out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                          "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                                          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")}
    env.update(SAFE_ENV)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("SYMMWIN_JIT_DIR", "/tmp/symmwin_jit")
    results = []
    log = open(out / "compare.log", "a")
    for i, backend in enumerate(args.backends):
        js = raw / f"{backend}.json"
        js.unlink(missing_ok=True)
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
            f"--master_port={args.port + i}", str(Path(__file__).resolve()), "--worker", backend,
            "--json", str(js), "--repeats", str(args.repeats), "--sizes-kib", *map(str, args.sizes_kib),
        ] + (["--no-a2a"] if args.no_a2a else [])
        print(f"== {backend}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        limit = args.job_timeout if backend in ("SYMMWIN", "CUDA") else min(args.job_timeout, 75)
        # Own session, so that a job past its limit is ended with all its ranks.
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            text, _ = p.communicate(timeout=limit)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            text, _ = p.communicate()
            rc = f"timeout after {limit} s"
        log.write(f"== {backend} rc={rc} {time.time() - t0:.0f}s\n{text}\n")
        log.flush()
        tail = "\n".join(text.splitlines()[-6:])
        print(f"== {backend}: rc={rc} in {time.time() - t0:.0f}s\n{tail}", flush=True)
        if js.exists():
            r = json.loads(js.read_text())
            r["rc"] = rc
        else:
            r = {"backend": backend, "items": [], "errors": [{"what": "job", "error": f"rc={rc}; see compare.log"}],
                 "rc": rc}
        results.append(r)
    return results


def med_rng(vals):
    return statistics.median(vals), min(vals), max(vals)


def size_label(b: int) -> str:
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def report(results: list[dict], out: Path, date: str = "") -> str:
    vers = next((r["versions"] for r in results if r.get("versions")), {})
    date = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    world = next((r["world"] for r in results if r.get("world")), "?")
    lines = [
        f"# SYMMWIN vs torch backends: {date}",
        "",
        f"Machine: {vers.get('gpu', '?')}, driver {vers.get('driver', '?')}, host {vers.get('host', '?')}; "
        f"torch {vers.get('torch', '?')} (CUDA {vers.get('cuda', '?')}), Triton {vers.get('triton', '?')}, "
        f"NCCL {vers.get('nccl', '?')}, Python {vers.get('python', '?')}, symmwin {vers.get('symmwin_rev', '?')}; "
        f"{world} ranks, one per GPU.",
        "",
        "Cells: median [min-max] over the repeats (each repeat: the slowest rank).",
        "",
    ]
    a2a = [(r["backend"], it) for r in results for it in r["items"] if it["kind"] == "a2a"]
    sizes = sorted({it["size"] for _, it in a2a})
    rows = {}
    for backend, it in a2a:
        rows.setdefault((backend, it["impl"], it["mode"]), {})[it["size"]] = it
    if rows:
        lines += [
            "## All-to-all: per-rank GB/s (bytes leaving the GPU / time) and us/iter, by chunk per peer",
            "",
            "| backend | implementation | mode | " + " | ".join(size_label(s) for s in sizes) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in sizes) + " |",
        ]
        for (backend, impl, mode), by_size in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
            cells = []
            for s in sizes:
                it = by_size.get(s)
                if not it:
                    cells.append("-")
                    continue
                g, glo, ghi = med_rng(it["gbs"])
                u = statistics.median(it["us"])
                cells.append(f"{g:.0f} [{glo:.0f}-{ghi:.0f}] GB/s, {u:.1f} us")
            lines.append(f"| {backend} | {impl} | {mode} | " + " | ".join(cells) + " |")
        lines += ["", "Launch shapes picked by the tuning pass:", ""]
        for (backend, impl, mode), by_size in sorted(rows.items()):
            cfgs = [f"{size_label(s)}: {by_size[s]['config']}" for s in sizes if s in by_size and by_size[s].get("config")]
            if cfgs:
                lines.append(f"- {backend} {impl} {mode}: " + "; ".join(cfgs))
        lines.append("")

    backends = [r["backend"] for r in results]
    lat_keys = []
    cells = {}
    for r in results:
        for it in r["items"]:
            if it["kind"] in ("alloc", "barrier", "allreduce", "latency"):
                label = it["impl"] + (f" {size_label(it['size'])}" if it.get("size") else "") + f" ({it['mode']})"
                if label not in lat_keys:
                    lat_keys.append(label)
                m, lo, hi = med_rng(it["us"])
                cells[(label, r["backend"])] = f"{m:.1f} [{lo:.1f}-{hi:.1f}]"
            elif it["kind"] == "memory":
                label = f"device memory, {it['impl']} 64 MiB window (MiB)"
                if label not in lat_keys:
                    lat_keys.append(label)
                cells[(label, r["backend"])] = f"{it['bytes'] / MIB:.1f}"
    if lat_keys:
        lines += [
            "## Latency (us) and memory",
            "",
            "| what | " + " | ".join(backends) + " |",
            "| --- | " + " | ".join("---" for _ in backends) + " |",
        ]
        for k in lat_keys:
            lines.append(f"| {k} | " + " | ".join(cells.get((k, b), "-") for b in backends) + " |")
        lines.append("")
    errs = [(r["backend"], e) for r in results for e in r.get("errors", [])]
    if errs:
        lines += ["## Not measured (errors)", ""]
        lines += [f"- {b}: {e['what']}: {e['error']}" for b, e in errs]
        lines.append("")
    md = "\n".join(lines)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"date": date, "results": results}, indent=1))
    plot(rows, sizes, out / "results.png", f"{date}: {vers.get('gpu', '?')}, torch {vers.get('torch', '?')}")
    return md


def plot(rows, sizes, path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", flush=True)
        return
    fig, axes = plt.subplots(1, 3, figsize=(18, 6))
    series = sorted({(b, i) for b, i, _ in rows})
    colors = {k: plt.cm.tab20(j % 20) for j, k in enumerate(series)}
    panels = [(0, "graph", "gbs"), (1, "eager", "gbs"), (2, "graph", "us")]
    for ax_i, want_mode, key in panels:
        ax = axes[ax_i]
        for (backend, impl, mode), by_size in sorted(rows.items()):
            xs = [s for s in sizes if s in by_size]
            if mode != want_mode or not xs:
                continue
            ax.plot([x / KIB for x in xs], [statistics.median(by_size[x][key]) for x in xs],
                    "-" if backend == "SYMMWIN" else "--", marker="o", ms=3, color=colors[(backend, impl)],
                    label=f"{backend}: {impl}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chunk per peer (KiB)")
        ax.set_ylabel("GB/s per rank (leaving the GPU)" if key == "gbs" else "us per all-to-all")
        ax.set_title(f"{'GB/s' if key == 'gbs' else 'us/iter'}, {want_mode}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if key == "gbs":
            ax.axhline(478, color="gray", lw=0.8, ls=":")
            ax.set_ylim(0, 500)
        else:
            ax.set_yscale("log")
    axes[0].legend(fontsize=6, loc="upper left")
    fig.suptitle(f"All-to-all push, {title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "results"))
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
    args = ap.parse_args()
    for k, v in SAFE_ENV.items():
        os.environ[k] = v

    if args.worker:
        return worker_main(args)
    if "RANK" in os.environ and os.environ["RANK"] != "0":
        return 0  # started under torchrun: rank 0 drives, the jobs start their own ranks
    if not args.nproc:
        import torch

        args.nproc = max(1, torch.cuda.device_count())
    out = Path(args.out)
    date = ""
    if args.report_only:
        merged = out / "results.json"
        if merged.exists() and not args.raw:
            data = json.loads(merged.read_text())
            results, date = data["results"], data["date"]
        else:
            raw = Path(args.raw) if args.raw else out / "raw"
            results = [json.loads((raw / f"{b}.json").read_text()) for b in args.backends if (raw / f"{b}.json").exists()]
    else:
        results = run_jobs(args)
    md = report(results, out, date)
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
