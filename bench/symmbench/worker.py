"""One job: every rank of one torchrun job measures one SymmetricMemory backend.

torch picks its backend once per process, so the driver starts one job per backend;
rank 0 writes what the job measured to ``--json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import cases
from .a2a import AllToAll
from .timing import Harness
from .versions import versions


class Job:
    """This rank's process group, backend and device, the harness, and the windows kept alive."""

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
        self.h = Harness(self.backend, self.device, args.repeats)
        self.keep: list = []
        dist.barrier()

    def run(self) -> dict:
        h = self.h
        h.guarded("memory", cases.memory, self)
        h.guarded("alloc", cases.alloc_latency, self)
        h.guarded("barrier", cases.barrier, self)
        h.guarded("allreduce", cases.all_reduce, self)
        if self.backend in ("SYMMWIN", "CUDA") and not self.args.no_a2a:
            a2a = h.guarded("a2a setup", AllToAll, self)
            if a2a is not None:
                a2a.run()
                if self.backend == "SYMMWIN":
                    a2a.floor()
                    h.guarded("one direction", a2a.one_direction)
        return {
            "backend": self.backend,
            "world": self.world,
            "items": h.items,
            "errors": h.errors,
            "versions": versions(self.torch),
        }


def worker_main(args, job_class=Job) -> int:
    """Run one job of `job_class` (a `Job`) on this rank; rank 0 writes its results."""
    job = job_class(args)
    result = job.run()
    if job.rank == 0:
        Path(args.json).write_text(json.dumps(result, indent=1))
    job.torch.cuda.synchronize()
    job.dist.barrier()
    # Windows stay alive until the process exits (torch's registries outlive ours).
    job.dist.destroy_process_group()
    return 0
