"""Scenarios of test_hostile.py, run inside each rank by worker.py: what a careless
user of torch.distributed does to symmetric memory (destroying and re-creating
process groups, passing ordinary tensors, stopping the store's host)."""

from __future__ import annotations

import gc
import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def _exchange(ctx, tag: float) -> float:
    """Rendezvous a fresh tensor on the world group; what the next rank wrote."""
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    t.fill_(tag)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier()
    peer = (ctx.rank + 1) % dist.get_world_size()
    value = float(hdl.get_buffer(peer, (64,), torch.float32)[0])
    hdl.barrier(channel=1)
    return value


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.01)


def reinit_on_the_same_port(ctx):
    """Rendezvous, destroy the group (a tensor and handle still alive), then
    re-initialise on the same port with the first `args["second_world"]` ranks."""
    first = _exchange(ctx, 10 + ctx.rank)
    kept = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    kept_hdl = symm_mem.rendezvous(kept, dist.group.WORLD)
    dist.barrier()
    dist.destroy_process_group()
    # Rank 0 serves the store: once it has let go, the port is closed (other ranks
    # may get here before rank 0 has destroyed its group, so only rank 0 looks). It
    # then says so through a file: a rank that connected before would reach the old
    # store as it closes, and its second init would fail with a broken pipe.
    store_closed = Path(ctx.args["store_closed"])
    if ctx.rank == 0:
        closed = not _port_open(ctx.port)
        store_closed.touch()
    else:
        closed = None
        _wait_for(store_closed, timeout=20)
    second_world = ctx.args["second_world"]
    if ctx.rank >= second_world:
        return {"first": first, "closed": closed, "second": None}
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{ctx.port}",
        rank=ctx.rank,
        world_size=second_world,
        timeout=timedelta(seconds=20),
    )
    second = _exchange(ctx, 20 + ctx.rank)
    del kept_hdl, kept
    return {"first": first, "closed": closed, "second": second}


def clean_job(ctx):
    """A clean job: rendezvous, free everything, destroy the group (by worker.py)."""
    value = _exchange(ctx, 1 + ctx.rank)
    gc.collect()
    return value


def foreign_tensor_on_one_rank(ctx):
    """Rank 1 passes an ordinary tensor; the next real rendezvous fails on every rank
    naming it. A foreign tensor on every rank stays a plain None."""
    if ctx.rank == 1:
        assert symm_mem.rendezvous(torch.zeros(64), dist.group.WORLD) is None
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    try:
        symm_mem.rendezvous(t, dist.group.WORLD)
        error = None
    except RuntimeError as e:
        error = str(e)
    everyone = symm_mem.rendezvous(torch.zeros(64), dist.group.WORLD)
    return {"error": error, "everyone_none": everyone is None}


def store_host_stopped(ctx):
    """Rank 0 (which serves the TCPStore) stops itself; rank 1's rendezvous must
    fail within the timeout saying the store is unreachable, then wake rank 0. The
    rendezvous is the first of a group made beforehand: a group's later ones do not
    use the store (its ranks' requests go over their sockets)."""
    first = _exchange(ctx, 1 + ctx.rank)
    pids = [None] * ctx.world
    dist.all_gather_object(pids, os.getpid())
    fresh_group = dist.new_group(list(range(ctx.world)))
    # new_group may still be reading rank 0's store on rank 1 when rank 0 returns from
    # it: a stop then would hang rank 1 there, outside symmwin (seen on a loaded CI
    # machine). After a barrier of the process group, rank 1 needs the store only for
    # the rendezvous under test.
    dist.barrier()
    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGSTOP)
        return {"first": first}
    time.sleep(0.3)  # rank 0 is stopped by now
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    error, waited = _timed_rendezvous(t, fresh_group)
    os.kill(pids[0], signal.SIGCONT)
    return {"first": first, "error": error, "waited": waited}


def store_host_killed(ctx):
    """Rank 0 (which serves the TCPStore) is killed; rank 1's rendezvous must say the
    store's host died. The dead peer leaves the process group unusable, so it is left
    to the interpreter's teardown (ctx.keep)."""
    first = _exchange(ctx, 1 + ctx.rank)
    fresh_group = dist.new_group(list(range(ctx.world)))  # as in store_host_stopped
    dist.barrier()
    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # rank 0 is gone by now
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    ctx.keep.append(t)
    error, waited = _timed_rendezvous(t, fresh_group)
    return {"first": first, "error": error, "waited": waited}


def _timed_rendezvous(t, group=None):
    """Rendezvous `t` on `group` (the world group by default); return the error it
    raised (None when it succeeded) and how long it took."""
    start = time.monotonic()
    try:
        symm_mem.rendezvous(t, group or dist.group.WORLD)
        error = None
    except RuntimeError as e:
        error = str(e)
    return error, time.monotonic() - start


def _rendezvous_error(ctx, group=None):
    """Rendezvous a fresh 64-float tensor; the error it raised (None when it worked),
    how long it took, and the tensor and handle (None on error)."""
    t = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    start = time.monotonic()
    try:
        hdl = symm_mem.rendezvous(t, group or dist.group.WORLD)
        return None, time.monotonic() - start, (t, hdl)
    except RuntimeError as e:
        return str(e), time.monotonic() - start, None


def out_of_step_after_a_lone_rendezvous(ctx):
    """Rank 1 makes one rendezvous alone (as when rank 0's op refused its arguments
    before its implicit rendezvous) and times out; then both make P and Q. Before, rank
    0's P mapped rank 1's abandoned tensor and every call said ok; now both fail,
    saying the group is out of step since rank 1's call."""
    error, _, kept = _rendezvous_error(ctx)
    assert error is None, error
    ctx.keep.append(kept)
    alone = None
    if ctx.rank == 1:
        alone, _, _ = _rendezvous_error(ctx)
    dist.barrier()
    p_error, _, p = _rendezvous_error(ctx)
    q_error, q_waited, q = _rendezvous_error(ctx)
    ctx.keep.extend([p, q])
    dist.barrier()
    return {"alone": alone, "p": p_error, "q": q_error, "q_waited": q_waited}


def abandoned_window_is_not_handed_out(ctx):
    """Rank 0 re-allocates a size both ranks freed (the window cache hands it the
    released window) and rendezvous alone, timing out after its offer went out. Rank 1
    then writes through that call's window if it can; rank 0's next tensor of that size
    must be fresh memory that reads zero."""
    error, _, first = _rendezvous_error(ctx)
    assert error is None, error
    del first
    gc.collect()
    # A rendezvous every rank makes releases the window both have freed.
    error, _, other = _rendezvous_error(ctx)
    assert error is None, error
    ctx.keep.append(other)
    dist.barrier()
    lone_error = None
    if ctx.rank == 0:
        lone_error, _, _ = _rendezvous_error(ctx)
    dist.barrier()
    late_error = None
    if ctx.rank == 1:
        late_error, _, late = _rendezvous_error(ctx)
        if late is not None:
            late[1].get_buffer(0, (64,), torch.float32).fill_(7.0)
            ctx.keep.append(late)
    dist.barrier()
    fresh = symm_mem.empty(64, dtype=torch.float32, device=ctx.device)
    nonzero = int((fresh != 0).sum())
    return {"lone": lone_error, "late": late_error, "nonzero": nonzero}
