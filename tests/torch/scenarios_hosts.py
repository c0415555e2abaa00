"""Scenarios for groups that span hosts, run inside each rank by worker.py (as
"scenarios_hosts.<name>"). ctx.args["hosts"][r] is the host of rank r; the ranks of
one host map each other, every other rank is reached through the process group."""

from __future__ import annotations

import gc
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

import symmwin
from scenarios import _p2p, _raises, _values


def _local(ctx) -> list[int]:
    hosts = ctx.args["hosts"]
    return [r for r in range(ctx.world) if hosts[r] == hosts[ctx.rank]]


def _pointer_pattern_ok(ctx, hdl, t, local) -> bool:
    """Peers of this host sit at base + r*stride, our own entry is our allocation (plus
    the offset: `t`), each with a signal pad; every other rank's buffer and pad
    pointers are 0."""
    base, stride = symmwin.flat_layout(hdl)
    ptrs, pads = hdl.buffer_ptrs, hdl.signal_pad_ptrs

    def own_or_slot(r: int) -> bool:
        if r == ctx.rank:
            return t.data_ptr() - ptrs[r] == hdl.offset
        return ptrs[r] == base + r * stride

    return all(
        (own_or_slot(r) and pads[r] != 0) if r in local else (ptrs[r] == 0 and pads[r] == 0)
        for r in range(ctx.world)
    )


def spanning(ctx):
    """Pointer pattern, direct peers, data through a local peer, barriers and a ring of
    signals that cross every host, then teardown in a rank-dependent order."""
    n = 256
    local = _local(ctx)
    t = symm_mem.empty(n, dtype=torch.float32, device=ctx.device)
    t.fill_(ctx.rank + 1)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    pattern_ok = _pointer_pattern_ok(ctx, hdl, t, local)
    remote = [r for r in range(ctx.world) if r not in local]
    errors = {
        "get_buffer": _raises(hdl.get_buffer, remote[0], (n,), torch.float32),
        "buffer_ptrs_dev": _raises(lambda: hdl.buffer_ptrs_dev),
        "signal_pad_ptrs_dev": _raises(lambda: hdl.signal_pad_ptrs_dev),
    }

    hdl.barrier()
    # Write into every local peer's buffer at our index; a barrier over the whole
    # group orders it; read what the local peers wrote.
    for peer in local:
        hdl.get_buffer(peer, (n,), torch.float32)[ctx.rank] = 100 + ctx.rank
    for channel in range(3):
        hdl.barrier(channel=channel, timeout_ms=10000)
    written = {r: _values(t[r : r + 1])[0] for r in local}

    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    for channel in (0, 3):
        for _ in range(3):
            hdl.put_signal(nxt, channel=channel)
            hdl.wait_signal(prv, channel=channel)
    hdl.barrier(channel=1)

    # More windows, freed in a rank-dependent order; then nothing is left.
    before = symmwin.allocation_count()
    handles, tensors = [], []
    for i in range(4):
        x = _p2p(ctx, 64 * (1 + i % 2))
        tensors.append(x)
        handles.append(symm_mem.rendezvous(x, dist.group.WORLD))
    handles[-1].barrier()
    order = list(range(4)) if ctx.rank % 2 == 0 else list(reversed(range(4)))
    for i in order:
        handles[i] = None
        tensors[i] = None
    gc.collect()
    dist.barrier()
    del x
    after = symmwin.allocation_count()
    return {
        "direct": symmwin.direct_peers(hdl),
        "wwda": symmwin.world_within_direct_access(hdl),
        "pattern_ok": pattern_ok,
        "errors": errors,
        "written": written,
        "allocations_left": after - before,
    }


def spanning_remote_timeout(ctx):
    """A wait for a flag that no rank on the other host sends times out, naming it. The
    process group is left as gloo leaves it after a timeout (not reused)."""
    local = _local(ctx)
    t = symm_mem.empty(64, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier()
    remote = [r for r in range(ctx.world) if r not in local][0]
    message = _raises(hdl.wait_signal, remote, channel=6, timeout_ms=500)
    ctx.keep.extend([t, hdl])
    return {"message": message, "peer": remote}


def _until_killed(ctx, call, keep) -> dict:
    """`call(i)` in a loop; rank ctx.args["victim"] is killed in the middle of it (or,
    with ctx.args["stop"], stopped: it is alive but never answers, and rank 0 kills it
    once it has its own result). The survivors' call raises, naming the victim: the
    iteration and the message."""
    victim = ctx.args["victim"]
    pids = [None] * ctx.world
    dist.all_gather_object(pids, os.getpid())
    how = signal.SIGSTOP if ctx.args.get("stop") else signal.SIGKILL
    for i in range(1000):
        if ctx.rank == victim and i == 20:
            os.kill(os.getpid(), how)
        try:
            call(i)
        except RuntimeError as e:
            # Stay a while, as a failing job's ranks do until the launcher ends them: a
            # survivor that exits at once closes its connections, and a peer still
            # waiting would then rightly name it (another rank gone).
            time.sleep(ctx.args.get("linger", 0))
            if how == signal.SIGSTOP and ctx.rank == 0:
                os.kill(pids[victim], signal.SIGKILL)
            # Survivors leave the group to interpreter teardown: it has a dead rank.
            ctx.keep.extend(keep)
            return {"iteration": i, "message": str(e)}
    raise AssertionError("the call never failed")


def spanning_kill(ctx):
    """Barriers in a loop across hosts until a rank is killed (see _until_killed)."""
    t = symm_mem.empty(64, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    return _until_killed(ctx, lambda i: hdl.barrier(channel=i % 2, timeout_ms=5000), [t, hdl])


def gpu_spanning(ctx):
    """CUDA windows of a group that spans hosts: the pointer pattern, and torch's ops
    that need every peer mapped fail with a clear error, never a fault (checked by a
    synchronize). With ctx.args["signals"] (NCCL between the ranks), barriers and
    signals across hosts run on the current stream."""
    local = _local(ctx)
    group = dist.group.WORLD.group_name
    n = 4096
    t = symm_mem.empty(n, device=ctx.device)
    t.fill_(ctx.rank + 1)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    pattern_ok = _pointer_pattern_ok(ctx, hdl, t, local)
    remote = [r for r in range(ctx.world) if r not in local]
    ops = torch.ops.symm_mem
    out = torch.empty(n // ctx.world, device=ctx.device)
    errors = {
        "one_shot_all_reduce": _raises(ops.one_shot_all_reduce, t, "sum", group),
        "two_shot_all_reduce_": _raises(ops.two_shot_all_reduce_, t, "sum", group),
        "reduce_scatter_out": _raises(ops.reduce_scatter_out, t, group, False, out),
        "get_buffer": _raises(hdl.get_buffer, remote[0], (n,), torch.float32),
    }
    ctx.sync()
    result = {
        "direct": symmwin.direct_peers(hdl),
        "wwda": symmwin.world_within_direct_access(hdl),
        "pattern_ok": pattern_ok,
        "errors": errors,
    }
    if ctx.args.get("signals"):
        for channel in range(3):
            hdl.barrier(channel=channel)
        nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
        for _ in range(3):
            hdl.put_signal(nxt, channel=1)
            hdl.wait_signal(prv, channel=1)
        hdl.barrier()
        ctx.sync()
        result["signals"] = "ok"
    return result


def spanning_one_sided(ctx):
    """One-sided ops to a rank on another host are refused naming it; to a rank on
    this host they work."""
    local = _local(ctx)
    remote = [r for r in range(ctx.world) if r not in local][0]
    partner = [r for r in local if r != ctx.rank][0]
    t = symm_mem.empty(64, device=ctx.device)
    t.fill_(ctx.rank + 1)
    symm_mem.rendezvous(t, dist.group.WORLD)
    dist.barrier()
    refused = _raises(symmwin.ops.put, t, remote)
    got = None
    if ctx.rank < partner:
        symmwin.ops.get(t, partner)
        got = _values(t[:1])[0]
    dist.barrier()
    return {"refused": refused, "remote": remote, "got": got, "partner": partner}


def spanning_ops_kill(ctx):
    """all_to_all in a loop across hosts until a rank is killed (see _until_killed)."""
    group = dist.group.WORLD.group_name
    inp = symm_mem.empty(ctx.world * 16, device=ctx.device)
    out = symm_mem.empty(ctx.world * 16, device=ctx.device)
    symm_mem.rendezvous(inp, dist.group.WORLD)
    symm_mem.rendezvous(out, dist.group.WORLD)
    return _until_killed(ctx, lambda i: torch.ops.symmwin.all_to_all(inp, out, group), [inp, out])
