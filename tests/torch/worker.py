"""One rank of a harness.run_world job: set up torch.distributed and the backend, run
a scenario, write its result as JSON. Not a test module; harness.py starts it."""

import ctypes
import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass
class Ctx:
    rank: int
    world: int
    device: str  # "cpu" or "cuda:<index>"
    args: dict
    # The port of the job's TCPStore (for scenarios that re-initialise on it).
    port: int = 0
    # Objects a scenario wants alive at interpreter exit.
    keep: list = field(default_factory=list)
    # Set by a scenario whose process cannot tear down normally (a lost CUDA context,
    # a dead peer): the worker writes the result, then leaves with os._exit(exit_code).
    exit_code: int | None = None

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def sync(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize()


def main() -> int:
    scenario, rank, world, port, device, out, args = sys.argv[1:]
    rank, world, args = int(rank), int(world), json.loads(args)

    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    import symmwin
    import hostile_scenarios
    import scenarios

    if device == "cuda":
        # Ranks share GPUs round-robin when there are fewer GPUs than ranks; the
        # process group is gloo everywhere because NCCL refuses two ranks per GPU,
        # and symmetric memory needs only the group's store.
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device, backend = f"cuda:{index}", symmwin.BACKEND
    else:
        backend = symmwin.HOST_BACKEND
    dist.init_process_group(
        args.get("pg_backend", "gloo"),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=args.get("group_timeout_s", 60)),
    )
    # torch_backend: leave torch's default backend in place, for reference results.
    if not args.get("torch_backend"):
        symm_mem.set_backend(backend)

    ctx = Ctx(rank, world, device, args, port=int(port))
    # "module:name" or "module.name" runs a scenario kept in another module of this
    # directory; a bare name is one of the backend's or the hostile scenarios.
    separator = ":" if ":" in scenario else "."
    module_name, _, name = scenario.rpartition(separator)
    if module_name:
        module = importlib.import_module(module_name)
    else:
        module = scenarios if hasattr(scenarios, name) else hostile_scenarios
    try:
        result = {"ok": True, "value": getattr(module, name)(ctx)}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(result, f)
    if ctx.exit_code is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        # C stdio too: the CUDA driver writes device printf output through it, and
        # os._exit skips its buffers.
        ctypes.CDLL(None).fflush(None)
        os._exit(ctx.exit_code)

    if result["ok"] and not ctx.keep and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    # With ctx.keep, handles, tensors and the process group are left for the
    # interpreter's own teardown, which is what such a scenario tests.
    return 0


if __name__ == "__main__":
    sys.exit(main())
