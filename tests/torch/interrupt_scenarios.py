"""Scenarios of test_interrupt.py, run inside each rank by worker.py: Ctrl-C (SIGINT)
while rank 0 waits in a host wait for rank 1, which does not come."""

from __future__ import annotations

import os
import signal
import threading
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def _wait_kinds(ctx, hdl, t):
    group = dist.group.WORLD.group_name
    return {
        "rendezvous": lambda: symm_mem.rendezvous(symm_mem.empty(64, device=ctx.device), dist.group.WORLD),
        "barrier": lambda: hdl.barrier(channel=0),
        "wait_signal": lambda: hdl.wait_signal(src_rank=1, channel=0),
        "all_to_all": lambda: torch.ops.symmwin.all_to_all(t[:32], t[32:], group),
    }


def ctrl_c_in_a_host_wait(ctx):
    """Rank 0 waits in `args["wait"]` while rank 1 sleeps; a SIGINT to rank 0 must
    raise KeyboardInterrupt within 100 ms. Returns how long that took."""
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    ctx.keep.append((t, hdl))
    if ctx.rank == 1:
        time.sleep(ctx.args["hold_s"])
        return None
    wait = _wait_kinds(ctx, hdl, t)[ctx.args["wait"]]
    sent = {}

    def interrupt():
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Timer(0.5, interrupt).start()
    try:
        wait()
    except KeyboardInterrupt:
        return {"raised": "KeyboardInterrupt", "after": time.monotonic() - sent["at"]}
    except BaseException as e:  # noqa: BLE001 - what else came is the finding
        return {"raised": type(e).__name__, "message": str(e)[:500], "after": None}
    return {"raised": None, "after": None}
