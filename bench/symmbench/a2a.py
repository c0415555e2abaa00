"""The all-to-all rows: the examples' push kernels, the copy engine and NCCL, each checked, then timed.

Per chunk size and mode (eager, graph): the CUDA C push (pointer array, and flat
addressing on SYMMWIN; SIMT and bulk-copy kernels, launch shape picked by a tuning pass),
the best SIMT push followed by ``hdl.barrier()``, the Triton push, a copy-engine push
and, in the CUDA job, NCCL ``all_to_all_single``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .defaults import KIB
from .examples import load_example, push_harness
from .timing import MODES, iters_for

TRITON_CONFIGS = [(4096, 8, 2), (2048, 4, 4), (8192, 8, 1)]  # (block, warps, programs per SM)


def simt_configs(Config) -> list:
    return [
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


def tma_configs(Config) -> list:
    return [
        Config("tma", 1, tile=32 * KIB, stages=4),
        Config("tma", 2, tile=16 * KIB, stages=4),
        Config("tma", 4, tile=8 * KIB, stages=4),
        Config("tma", 2, tile=32 * KIB, stages=2),
        Config("tma", 8, tile=4 * KIB, stages=4),
    ]


@dataclass
class Case:
    """One chunk size in one mode: the buffers and how many calls a repeat times."""

    size: int
    n: int
    send: object
    recv: object
    iters: int
    mode: str
    graph: bool


class AllToAll:
    """The all-to-all window of one job (sized for the largest chunk) and its rows."""

    def __init__(self, job):
        torch, symm_mem = job.torch, job.symm_mem
        self.job, self.h = job, job.h
        self.rank, self.world = job.rank, job.world
        max_n = max(job.args.sizes_kib) * KIB // 4
        self.send = torch.empty(self.world * max_n, dtype=torch.int32, device=job.device)
        self.win = symm_mem.empty(self.world * max_n, dtype=torch.int32, device=job.device)
        self.hdl = symm_mem.rendezvous(self.win, job.group)
        job.keep += [self.win, self.hdl]
        self.cp = load_example("cuda_push")
        self.tp = load_example("triton_push")
        self.mod = self.cp.build(self.rank, world_barrier=job.dist.barrier)

    def views(self, n: int):
        send = self.send[: self.world * n]
        recv = self.win[: self.world * n]
        push_harness.fill_send(send, self.rank, self.world)
        return send, recv

    def verify(self, what: str, fn, recv, n: int) -> None:
        """fn must deliver every element on every rank."""
        bad = push_harness.check_push(self.hdl, fn, recv, self.rank, self.world, n)
        bad = int(self.h.slowest([float(bad)])[0])
        if bad:
            raise RuntimeError(f"{what}: {bad} wrong elements")

    def run(self) -> None:
        flat_modes = [False, True] if self.job.backend == "SYMMWIN" else [False]
        for size_kib in self.job.args.sizes_kib:
            size = size_kib * KIB
            n = size // 4
            send, recv = self.views(n)
            for mode, graph in MODES:
                case = Case(size, n, send, recv, iters_for(size), mode, graph)
                for flat in flat_modes:
                    self.cuda_rows(case, flat)
                self.h.guarded(f"triton {size} {mode}", self.triton_row, case)
                self.h.guarded(f"copy engine {size} {mode}", self.copy_engine_row, case)
                if self.job.backend == "CUDA":  # NCCL does not depend on the symmetric backend
                    self.h.guarded(f"nccl {size} {mode}", self.nccl_row, case)

    def cuda_rows(self, case: Case, flat: bool) -> None:
        """The CUDA C push, SIMT then bulk copy; after the SIMT pointer-array row, its push+barrier."""
        Config = self.cp.Config
        for family, cfgs in (("simt", simt_configs(Config)), ("tma", tma_configs(Config))):
            impl = f"cuda {family} {'flat' if flat else 'ptrs'}"

            def make(cfg):
                return self.cp.Pusher(self.mod, self.hdl, case.send, case.recv, flat, cfg, self.job.sms)

            cfg = self.h.guarded(f"{impl} {case.size} {case.mode}", self.tuned_row, case, impl, make, cfgs)
            if family == "simt" and not flat and cfg is not None:
                self.h.guarded(f"cuda+barrier {case.size} {case.mode}", self.push_barrier_row, case, make(cfg), cfg)

    def tuned_row(self, case: Case, impl: str, make, cfgs):
        """Tune, check and time one launch-shaped implementation: the config it ran with."""
        cfg = self.h.tune(make, cfgs, case.size, case.graph)
        if cfg is None:
            raise RuntimeError("no config ran")
        push = make(cfg)
        self.verify(f"{impl} {cfg.label()}", push, case.recv, case.n)
        self.record(case, impl, push, config=cfg.label())
        return cfg

    def push_barrier_row(self, case: Case, push, cfg) -> None:
        """A complete exchange: after the barrier the receiver may read."""
        hdl = self.hdl

        def push_barrier():
            push()
            hdl.barrier(channel=0)

        self.record(case, "cuda simt ptrs+barrier", push_barrier, config=cfg.label())

    def triton_row(self, case: Case) -> None:
        def make(c):
            return self.tp.TritonPusher(self.hdl, case.send, case.recv, self.job.sms,
                                        block=c[0], num_warps=c[1], programs_per_sm=c[2])

        c = self.h.tune(make, TRITON_CONFIGS, case.size, case.graph)
        if c is None:
            raise RuntimeError("no config ran")
        push = make(c)
        self.verify("triton", push, case.recv, case.n)
        self.record(case, "triton ptrs", push, config=f"B{c[0]} w{c[1]} p{c[2]}")

    def copy_engine_row(self, case: Case) -> None:
        """copy_ into the peers' windows (get_buffer views); the local chunk on a second
        stream, overlapping the remote copies."""
        torch, n = self.job.torch, case.n
        elem_off = (self.hdl.offset + case.recv.storage_offset() * 4) // 4
        dsts, srcs = [], []
        for p in [(self.rank + 1 + j) % self.world for j in range(self.world)]:
            peer = self.hdl.get_buffer(p, (self.world * n,), torch.int32, elem_off)
            dsts.append(peer[self.rank * n : (self.rank + 1) * n])
            srcs.append(case.send[p * n : (p + 1) * n])
        side = torch.cuda.Stream()

        def ce():
            cur = torch.cuda.current_stream()
            side.wait_stream(cur)
            for d, s in zip(dsts[:-1], srcs[:-1]):
                d.copy_(s)
            with torch.cuda.stream(side):
                dsts[-1].copy_(srcs[-1])
            cur.wait_stream(side)

        self.verify("copy engine", ce, case.recv, case.n)
        self.record(case, "copy engine", ce)

    def nccl_row(self, case: Case) -> None:
        torch, dist = self.job.torch, self.job.dist
        out = torch.empty_like(case.send)

        def nccl():
            dist.all_to_all_single(out, case.send)

        out.fill_(-1)
        nccl()
        torch.cuda.synchronize()
        bad = int(self.h.slowest([float(push_harness.check_recv(out, self.rank, self.world, case.n))])[0])
        if bad:
            raise RuntimeError(f"all_to_all_single: {bad} wrong elements")
        self.record(case, "nccl all_to_all_single", nccl)

    def record(self, case: Case, impl: str, fn, **extra) -> None:
        self.h.record("a2a", impl, case.size, case.mode, self.h.time_gpu(fn, case.iters, case.graph), **extra)

    def floor(self) -> None:
        """An empty kernel launched like the push kernel: the launch floor."""
        for pdl in (0, 1):
            for mode, graph in MODES:
                self.h.guarded(
                    f"empty kernel {mode}",
                    lambda: self.h.record("latency", "empty kernel" + (" pdl" if pdl else ""), None, mode,
                                          self.h.time_gpu(lambda: self.mod.empty(pdl), 200, graph)),
                )

    def one_direction(self) -> None:
        """Only rank 0 pushes: what one direction of the link carries alone."""
        cfg = self.cp.Config("simt", 2, 512, 8)
        for size_kib in (16384, 65536):
            if size_kib not in self.job.args.sizes_kib:
                continue
            n = size_kib * KIB // 4
            send, recv = self.views(n)
            push = self.cp.Pusher(self.mod, self.hdl, send, recv, False, cfg, self.job.sms)
            fn = push if self.rank == 0 else (lambda: None)
            self.h.guarded(
                f"one direction {size_kib}",
                lambda: self.h.record("a2a", "cuda simt ptrs, rank 0 only", size_kib * KIB, "graph",
                                      self.h.time_gpu(fn, iters_for(size_kib * KIB), True), config=cfg.label()),
            )
