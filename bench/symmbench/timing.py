"""The timing harness: GPU and host timers over every rank, and the rows they produce.

Every timer returns one value per repeat, in microseconds, each the slowest rank's
(an all-reduce MAX over the default process group), with the warm-up excluded. A row
(``record``) is one dict of results.json's ``items``:
``{"kind", "impl", "size", "mode", "us": [...], "gbs": [...] (when bytes leave the GPU),
**extra}``; ``guarded`` turns a failed measurement into an entry of ``errors``
(``{"what", "error"}``) so that the job goes on.
"""

from __future__ import annotations

import statistics
import time
import traceback

# (mode, graph): every GPU row is timed eagerly and under CUDA graph replay.
MODES = (("eager", False), ("graph", True))


class Harness:
    """Times calls on this rank and its peers and keeps the rows and errors of one job.

    Needs the default process group initialised and the current CUDA device set.
    `tag` prefixes the log lines (rank 0 only); `repeats` is the default per timer.
    """

    def __init__(self, tag: str, device, repeats: int):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.tag, self.device, self.repeats = tag, device, repeats
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.items: list[dict] = []
        self.errors: list[dict] = []

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[{self.tag}] {msg}", flush=True)

    def guarded(self, what: str, fn, *a, **kw):
        """Run one measurement; record an error instead of ending the job (then None)."""
        try:
            return fn(*a, **kw)
        except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.errors.append({"what": what, "error": msg})
            if self.rank == 0:
                print(f"[{self.tag}] {what}: FAILED {msg}", flush=True)
                traceback.print_exc()
            self.torch.cuda.synchronize()
            self.dist.barrier()
            return None

    def slowest(self, values: list[float]) -> list[float]:
        """Element-wise maximum of `values` over the ranks."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def time_gpu(self, fn, iters: int, graph: bool, repeats: int | None = None) -> list[float]:
        """us per call of fn (CUDA events around `iters` calls), one value per repeat."""
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        if graph:
            g = self._capture(fn, iters)
            run = g.replay
        else:
            g = None

            def run():
                for _ in range(iters):
                    fn()

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeats or self.repeats):
            self.dist.barrier()
            torch.cuda.synchronize()
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / iters)
        del g
        return self.slowest(times)

    def _capture(self, fn, iters: int):
        return capture_graph(self.torch, fn, iters)

    def time_host(self, fn, repeats: int | None = None, keep: list | None = None) -> list[float]:
        """us of one call of fn on the host clock, the device synchronised, one value per repeat.

        No warm-up: fit for calls that must be fresh every time (allocation, rendezvous).
        What fn returns goes into `keep` once the clock has stopped, so that an allocation
        stays alive and the next repeat cannot be handed the same memory back.
        """
        torch = self.torch
        ts = []
        for _ in range(repeats or self.repeats):
            self.dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            result = fn()
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e6)
            if keep is not None:
                keep.append(result)
        return self.slowest(ts)

    def tune(self, make, configs, size: int, graph: bool):
        """The config whose `make(config)` runs fastest (slowest rank); not part of the results."""
        best, best_us = None, float("inf")
        iters = max(4, iters_for(size) // 4)
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

    def record(self, kind: str, impl: str, size: int | None, mode: str, us: list[float],
               bytes_out: int | None = None, **extra) -> dict:
        """Keep and log one row. GB/s per repeat where bytes leave the GPU: `bytes_out`
        per call, by default (world-1) chunks of `size` for kind "a2a"."""
        item = {"kind": kind, "impl": impl, "size": size, "mode": mode, "us": us, **extra}
        med = statistics.median(us)
        if bytes_out is None and kind == "a2a":
            bytes_out = (self.world - 1) * size
        extra_s = ""
        if bytes_out is not None:
            item["gbs"] = [bytes_out / t / 1e3 for t in us]
            extra_s = f" {bytes_out / med / 1e3:7.1f} GB/s"
        self.items.append(item)
        self.log(
            f"{kind:10s} {impl:22s} {size if size is not None else '':>10} {mode:5s} "
            f"{med:9.2f} us [{min(us):.2f}-{max(us):.2f}]{extra_s} {extra.get('config', '')}"
        )
        return item


def iters_for(size_bytes: int) -> int:
    """Calls per timed repeat: about 4 ms of work, 8 to 200 calls."""
    est_us = 3.0 + size_bytes / 300e3
    return int(min(200, max(8, 4000 / est_us)))


def capture_graph(torch, fn, iters: int):
    """A CUDA graph of `iters` calls, replayed once (warmed on a side stream first)."""
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
    return g
