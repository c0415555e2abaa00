"""Scenarios run inside each rank by worker.py. Each takes a worker.Ctx and returns
something JSON-serialisable for the test to assert on; checks that only make sense
inside the rank are asserted here (a failure travels back as a traceback).

Device-generic unless named gpu_*: ctx.device is "cpu" (SYMMWIN_HOST) or "cuda:<rank>"
(SYMMWIN)."""

from __future__ import annotations

import gc
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch._C._distributed_c10d import _SymmetricMemory

import symmwin


def _p2p(ctx, numel: int, dtype=torch.float32, group_name=None, alloc_id=None) -> torch.Tensor:
    """A symmetric tensor straight from the allocator (no MemPool in between, so a
    `del` reaches the allocator's free)."""
    return _SymmetricMemory.empty_strided_p2p(
        (numel,), (1,), dtype, torch.device(ctx.device), group_name, alloc_id
    )


def _raises(fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except RuntimeError as e:
        return str(e)
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} did not raise")


def _values(t: torch.Tensor) -> list:
    return t.cpu().tolist()


# ---------------------------------------------------------------------------


def basic(ctx):
    """Allocate, rendezvous on the world group, exchange data, check the layout."""
    n = 256
    t = symm_mem.empty(n, dtype=torch.float32, device=ctx.device)
    zero_filled = bool((t == 0).all())
    t.fill_(ctx.rank + 1)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier()
    seen = [_values(hdl.get_buffer(peer, (n,), torch.float32))[:: n // 4] for peer in range(ctx.world)]
    # Everyone has read before anyone overwrites (index 0 of rank 0's buffer is both).
    hdl.barrier(channel=2)

    # Write into every peer's buffer at our own index, then read what peers wrote.
    for peer in range(ctx.world):
        hdl.get_buffer(peer, (n,), torch.float32)[ctx.rank] = 100 + ctx.rank
    hdl.barrier(channel=1)
    written = _values(t[: ctx.world])

    ptrs = hdl.buffer_ptrs
    base, stride = symmwin.flat_layout(hdl)
    pad = hdl.get_signal_pad(ctx.rank, (symm_mem.get_signal_pad_size() // 4,), torch.int32)
    ctx.sync()
    return {
        "zero_filled": zero_filled,
        "seen": seen,
        "written": written,
        "rank": hdl.rank,
        "world_size": hdl.world_size,
        "device": str(hdl.device),
        "buffer_size": hdl.buffer_size,
        # Peers at their slots of the flat span; the own entry is the allocation (own
        # entry + offset is the tensor), the own slot an alias of it.
        "flat": all(p == base + r * stride for r, p in enumerate(ptrs) if r != ctx.rank) and stride > 0,
        "own_is_allocation": t.data_ptr() - ptrs[ctx.rank] == hdl.offset,
        "own_slot_is_an_alias": ptrs[ctx.rank] != base + ctx.rank * stride,
        "pad_zero_at_rest": bool((pad == 0).all()),
        "rank_to_global": symmwin.rank_to_global(hdl),
        "plain_tensor": repr(symm_mem.rendezvous(torch.zeros(4, device=ctx.device), dist.group.WORLD)),
    }


def signals(ctx):
    """put_signal / wait_signal in a ring, barriers on several channels, and (host
    memory) a wait that times out. A device-side timeout traps and loses the CUDA
    context, so test_device_timeouts.py runs those in worlds of their own."""
    t = symm_mem.empty(64, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    for channel in (0, 3, 5):
        hdl.put_signal(nxt, channel=channel)
        hdl.wait_signal(prv, channel=channel)
    for channel in range(4):
        hdl.barrier(channel=channel, timeout_ms=10000)
    ctx.sync()
    if ctx.is_cuda:
        return {"timeout_message": None, "peer": prv}

    # Nobody signals channel 7; every rank waits on its previous rank and times out,
    # raising from the call itself (host memory).
    timeout_message = _raises(hdl.wait_signal, prv, channel=7, timeout_ms=300)
    # The wait that ended early poisoned the window: the next call is refused at once
    # (a late post must not pair with it); a new window of the group works.
    refused = _raises(hdl.barrier, channel=2)
    fresh = symm_mem.rendezvous(symm_mem.empty(64, device=ctx.device), dist.group.WORLD)
    fresh.barrier(channel=2)
    ctx.sync()
    return {"timeout_message": timeout_message, "peer": prv, "refused": refused}


def bad_input(ctx):
    """Out-of-range ranks and channels, and ranks that disagree on the size, are
    errors (RuntimeError on every rank), never crashes or hangs."""
    t = symm_mem.empty(64, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    errors = {
        "put_rank": _raises(hdl.put_signal, ctx.world),
        "wait_rank": _raises(hdl.wait_signal, -1),
        "put_channel": _raises(hdl.put_signal, 0, channel=1 << 20),
        "barrier_channel": _raises(hdl.barrier, channel=-1),
        "get_buffer_rank": _raises(hdl.get_buffer, ctx.world, (4,), torch.float32),
        "get_buffer_size": _raises(hdl.get_buffer, 0, (1 << 20,), torch.float32),
    }
    hdl.barrier()
    ctx.sync()

    odd = _p2p(ctx, 64 * (ctx.rank + 1))
    errors["size_mismatch"] = _raises(symm_mem.rendezvous, odd, dist.group.WORLD)
    # A failed rendezvous leaves the group usable.
    again = _p2p(ctx, 64)
    again.fill_(ctx.rank)
    hdl2 = symm_mem.rendezvous(again, dist.group.WORLD)
    hdl2.barrier()
    after = [_values(hdl2.get_buffer(p, (1,), torch.float32))[0] for p in range(ctx.world)]
    ctx.sync()
    return {"errors": errors, "after": after}


def subgroups(ctx):
    """The same tensor on the world group and on a subgroup ({0,2} / {1,3})."""
    evens = dist.new_group([0, 2])
    odds = dist.new_group([1, 3])
    sub = evens if ctx.rank % 2 == 0 else odds

    n = 32
    t = symm_mem.empty(n, device=ctx.device)
    t.fill_(ctx.rank)
    world_hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    sub_hdl = symm_mem.rendezvous(t, sub)
    world_hdl.barrier()
    sub_hdl.barrier()
    partner = 1 - sub_hdl.rank
    from_partner = _values(sub_hdl.get_buffer(partner, (n,), torch.float32))[0]
    from_world = [_values(world_hdl.get_buffer(p, (1,), torch.float32))[0] for p in range(ctx.world)]

    # Allocated for the subgroup, rendezvoused with no group: torch's fused ops do
    # this (get_symm_mem_workspace), and the allocation's group must be used.
    ws = _p2p(ctx, 16, group_name=sub.group_name)
    ws_hdl = _SymmetricMemory.rendezvous(ws)
    ws_hdl.barrier()
    ctx.sync()
    return {
        "world": [world_hdl.rank, world_hdl.world_size, symmwin.rank_to_global(world_hdl)],
        "sub": [sub_hdl.rank, sub_hdl.world_size, symmwin.rank_to_global(sub_hdl)],
        "workspace": [ws_hdl.rank, ws_hdl.world_size, symmwin.rank_to_global(ws_hdl)],
        "from_partner": from_partner,
        "from_world": from_world,
    }


def persistent(ctx):
    """empty_strided_p2p with alloc_id: the same address while not in use, refused
    while in use; a rendezvous without group uses the world group."""
    a = _p2p(ctx, 128, alloc_id=7)
    ptr = a.data_ptr()
    hdl = _SymmetricMemory.rendezvous(a)
    a.fill_(ctx.rank + 1)
    hdl.barrier()
    peer = (ctx.rank + 1) % ctx.world
    peer_value = _values(hdl.get_buffer(peer, (1,), torch.float32))[0]
    in_use = _raises(_p2p, ctx, 128, alloc_id=7)
    del a
    b = _p2p(ctx, 128, alloc_id=7)
    hdl.barrier()
    ctx.sync()
    return {
        "same_address": b.data_ptr() == ptr,
        "in_use_error": in_use,
        "world_size": hdl.world_size,
        "peer_value": peer_value,
    }


def teardown(ctx):
    """Tensors and handles freed in a different order on every rank: nothing leaks,
    a handle outlives its tensor, and the address space is reused safely."""
    n = 1024
    handles, tensors = [], []
    for i in range(6):
        t = _p2p(ctx, n)
        t.fill_(ctx.rank * 10 + i)
        tensors.append(t)
        handles.append(symm_mem.rendezvous(t, dist.group.WORLD))
    del t
    handles[-1].barrier()
    live = symmwin.allocation_count()

    # Free in a rank-dependent order (as the garbage collector would).
    order = list(range(6)) if ctx.rank % 2 == 0 else list(reversed(range(6)))
    survivor = handles[order[0]]
    del handles
    for i in order:
        tensors[i] = None
    gc.collect()
    after_free = symmwin.allocation_count()

    # The handle still maps every peer's memory after the tensors are gone.
    peer = (ctx.rank + 1) % ctx.world
    kept = _values(survivor.get_buffer(peer, (1,), torch.float32))[0]
    # Survivors differ per rank, so synchronise through the process group.
    dist.barrier()
    del survivor
    gc.collect()

    # Allocate and rendezvous again, many times, with rank-dependent lifetimes.
    for round_ in range(10):
        t = _p2p(ctx, n * (1 + round_ % 3))
        t.fill_(round_)
        h = symm_mem.rendezvous(t, dist.group.WORLD)
        h.barrier()
        assert _values(h.get_buffer(peer, (1,), torch.float32))[0] == round_
        h.barrier(channel=1)
        if ctx.rank % 2:
            del h, t
        else:
            del t, h
        gc.collect()
    ctx.sync()
    return {
        "live": live,
        "after_free": after_free,
        "kept": kept,
        "expected_kept": peer * 10 + order[0],
        "final": symmwin.allocation_count(),
    }


def exit_with_live_handles(ctx):
    """Leave tensors, handles and the process group for interpreter teardown."""
    t = symm_mem.empty(4096, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier()
    t2 = _p2p(ctx, 64)
    hdl2 = symm_mem.rendezvous(t2, dist.group.WORLD)
    hdl2.put_signal((ctx.rank + 1) % ctx.world)
    hdl2.wait_signal((ctx.rank - 1) % ctx.world)
    ctx.keep.extend([t, hdl, t2, hdl2])
    return True



# ---------------------------------------------------------------------------
# CUDA only: torch's symm_mem ops running on our memory.


def _ramp(ctx, n, dtype, r):
    # Small integers: exact in bf16 and in any summation order, so results can be
    # compared bit for bit whatever kernel produced them.
    return ((torch.arange(n, device=ctx.device) % 7) + r).to(dtype)


def _seeded(shape, seed, dtype, device):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(dtype).to(device)


def gpu_ops(ctx):
    """Every torch 2.11 symm_mem op we support, checked against the analytic result.

    Returns {"checks": {op: "ok" | what went wrong}, "sums": {op: float}}; the sums let
    the test compare against the same scenario on torch's own CUDA backend."""
    dtype = getattr(torch, ctx.args["dtype"])
    group = dist.group.WORLD.group_name
    W, rank, dev = ctx.world, ctx.rank, ctx.device
    n = 8192
    ops = torch.ops.symm_mem
    expected = sum(_ramp(ctx, n, dtype, r).float() for r in range(W)).to(dtype)
    checks, sums = {}, {}

    def record(name, got, want, exact=True, **tol):
        sums[name] = float(got.float().abs().sum())
        try:
            if exact:
                assert torch.equal(got, want), f"max diff {(got.float() - want.float()).abs().max()}"
            else:
                torch.testing.assert_close(got.float(), want.float(), **tol)
            checks[name] = "ok"
        except AssertionError as e:
            checks[name] = str(e)[:500]

    x = symm_mem.empty(n, dtype=dtype, device=dev)
    x.copy_(_ramp(ctx, n, dtype, rank))
    record("one_shot_all_reduce", ops.one_shot_all_reduce(x, "sum", group), expected)

    out = torch.empty_like(x)
    ops.one_shot_all_reduce_out(x, "sum", group, out)
    record("one_shot_all_reduce_out", out, expected)

    staging = symm_mem.empty(n, dtype=dtype, device=dev)
    local = _ramp(ctx, n, dtype, rank)
    record("one_shot_all_reduce_copy", ops.one_shot_all_reduce_copy(staging, local, "sum", group), expected)

    y = symm_mem.empty(n, dtype=dtype, device=dev)
    y.copy_(_ramp(ctx, n, dtype, rank))
    ops.two_shot_all_reduce_(y, "sum", group)
    record("two_shot_all_reduce_", y, expected)

    z = symm_mem.empty(n, dtype=dtype, device=dev)
    z.copy_(_ramp(ctx, n, dtype, rank))
    out2 = torch.empty_like(z)
    ops.two_shot_all_reduce_out(z, "sum", group, out2)
    record("two_shot_all_reduce_out", out2, expected)

    rs_in = symm_mem.empty(n, dtype=dtype, device=dev)
    rs_in.copy_(_ramp(ctx, n, dtype, rank))
    rs_out = torch.empty(n // W, dtype=dtype, device=dev)
    ops.reduce_scatter_out(rs_in, group, False, rs_out)
    record("reduce_scatter_out", rs_out, expected.chunk(W)[rank])

    # Remote tensors, and driver memory operations on a peer's memory through our
    # mapping.
    flags = symm_mem.empty(4 * W, dtype=torch.uint32, device=dev)
    hdl = symm_mem.rendezvous(flags, group)
    peer = (rank + 1) % W
    remote = hdl.get_remote_tensor(peer, (4 * W,), torch.uint32)
    ops.stream_write_value32_(remote, rank, rank + 1)
    ops.memset32_(remote, W + 2 * rank, 100 + rank, 2)
    hdl.barrier()
    src = (rank - 1) % W
    want = torch.zeros(4 * W, dtype=torch.int32)
    want[src] = src + 1
    want[W + 2 * src : W + 2 * src + 2] = 100 + src
    record("stream_write_value32_+memset32_", flags.view(torch.int32).cpu(), want)

    data = symm_mem.empty(n, dtype=dtype, device=dev)
    data.copy_(_ramp(ctx, n, dtype, rank))
    data_hdl = symm_mem.rendezvous(data, group)
    data_hdl.barrier()
    record("get_remote_tensor", data_hdl.get_remote_tensor(peer, (n,), dtype), _ramp(ctx, n, dtype, peer))
    data_hdl.barrier()

    pool = symm_mem.get_mem_pool(dev)
    with torch.cuda.use_mem_pool(pool):
        pooled = torch.empty(n, dtype=dtype, device=dev)
    pooled.copy_(_ramp(ctx, n, dtype, rank))
    record("mem_pool+one_shot_all_reduce", ops.one_shot_all_reduce(pooled, "sum", group), expected)

    M, K, N = 128, 256, 64
    tol = dict(rtol=2e-2, atol=1e-1) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
    B = _seeded((K, N), 1000, dtype, dev)
    shard = _seeded((M, K), rank, dtype, dev)
    A_full = torch.cat([_seeded((M, K), r, dtype, dev) for r in range(W)])
    A_gathered, (AB,) = ops.fused_all_gather_matmul(shard, [B], 0, group)
    record("fused_all_gather_matmul.A", A_gathered, A_full)
    record("fused_all_gather_matmul", AB, A_full @ B, exact=False, **tol)

    A = _seeded((M * W, K), 100 + rank, dtype, dev)
    partials = sum((_seeded((M * W, K), 100 + r, dtype, dev) @ B).float() for r in range(W))
    rs = ops.fused_matmul_reduce_scatter(A, B, "sum", 0, group)
    rs_tol = dict(rtol=5e-2, atol=5e-1) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
    record("fused_matmul_reduce_scatter", rs, partials.chunk(W)[rank], exact=False, **rs_tol)

    # The low-contention collectives take plain tensors and stage them through a
    # symmetric workspace of the group, which comes from our allocator. They run on a
    # side stream and are functional collectives: wait_tensor orders their result.
    wait = torch.ops._c10d_functional.wait_tensor
    plain = _ramp(ctx, n, dtype, rank)
    gathered = wait(ops._low_contention_all_gather(plain, group))
    record("_low_contention_all_gather", gathered, torch.cat([_ramp(ctx, n, dtype, r) for r in range(W)]))
    scattered = wait(ops._low_contention_reduce_scatter(plain, "sum", group))
    record("_low_contention_reduce_scatter", scattered, expected.chunk(W)[rank])

    ctx.sync()
    return {"checks": checks, "sums": sums}

# The ops scenarios (torch.ops.symmwin.*) live in their own module.
from ops_scenarios import (  # noqa: E402,F401
    ops_a2a_2d,
    ops_a2a_vdev,
    ops_bad_input,
    ops_compiled,
    ops_disagree,
    ops_host_sized,
    ops_one_sided,
    ops_same_as_torch,
    ops_soak,
    ops_tiles,
    ops_timeouts,
)

# ---------------------------------------------------------------------------
# Device-side timeouts (CUDA). A wait that times out traps: torch's next synchronize
# raises, the CUDA context is lost, and the next symmwin call raises symmwin's error
# naming the op, channel and peers. Each rank that saw one leaves with os._exit.


def _first_line(e: BaseException) -> str:
    return next((line for line in str(e).splitlines() if line.strip()), repr(e))


def _timed_op(hdl, op: str, peer: int, timeout_ms: int) -> None:
    """Start `op` waiting for `peer` on channel 1; `put_signal` signals twice, so the
    second waits for a slot the peer never clears."""
    if op == "barrier":
        hdl.barrier(channel=1, timeout_ms=timeout_ms)
    elif op == "wait_signal":
        hdl.wait_signal(peer, channel=1, timeout_ms=timeout_ms)
    elif op == "put_signal":
        hdl.put_signal(peer, channel=1, timeout_ms=timeout_ms)
        hdl.put_signal(peer, channel=1, timeout_ms=timeout_ms)
    else:
        raise ValueError(op)


def _after_device_timeout(ctx, hdl, start: float) -> dict:
    """What a rank sees once its device wait timed out: torch's synchronize error, how
    long after `start` it came, and the errors of the next symmwin calls."""
    out = {"rank": ctx.rank}
    try:
        torch.cuda.synchronize()
        out["sync_error"] = None
    except RuntimeError as e:
        out["sync_error"] = f"{type(e).__name__}: {_first_line(e)}"
        out["sync_error_is_symmwin_timeout"] = isinstance(e, symmwin.TimeoutError)
    out["raised_after_s"] = round(time.monotonic() - start, 3)
    try:
        hdl.barrier(channel=2, timeout_ms=1000)
        out["next_call_error"] = None
    except RuntimeError as e:
        out["next_call_error"] = _first_line(e)
        out["next_call_is_symmwin_timeout"] = isinstance(e, symmwin.TimeoutError)
    try:
        _p2p(ctx, 16)
        out["alloc_error"] = None
    except RuntimeError as e:
        out["alloc_error"] = _first_line(e)
    # The context is lost and peers may be dead: no teardown, as a user's program would.
    ctx.exit_code = 0
    return out


def _ready_window(ctx):
    t = symm_mem.empty(64, device=ctx.device)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier(channel=0)
    ctx.sync()
    dist.barrier()
    return hdl


def gpu_timeout_killed_peer(ctx):
    """The last rank is SIGKILLed while the others wait for it in args["op"]."""
    op, timeout_ms = ctx.args["op"], ctx.args["timeout_ms"]
    victim = ctx.world - 1
    hdl = _ready_window(ctx)
    if ctx.rank == victim:
        time.sleep(0.5)  # the others are waiting for us by now
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    _timed_op(hdl, op, victim, timeout_ms)
    return _after_device_timeout(ctx, hdl, start)


def gpu_timeout_alone(ctx):
    """torch's negative tests: only rank 0 calls args["op"] (timeout_ms 1000), waiting
    for rank 1, which never takes part."""
    hdl = _ready_window(ctx)
    if ctx.rank != 0:
        # Stay alive until rank 0 is done, as torch's negative tests do: a rank that
        # exits frees its window, which zeroes its pad slots and so would consume the
        # signal a second put_signal is waiting on.
        dist.barrier()
        ctx.exit_code = 0
        return {"rank": ctx.rank, "idle": True}
    start = time.monotonic()
    _timed_op(hdl, ctx.args["op"], 1, 1000)
    out = _after_device_timeout(ctx, hdl, start)
    dist.barrier()  # gloo, on the CPU: still works with the CUDA context lost
    return out


def _graph_of(fn):
    """`fn` captured in a CUDA graph, after one eager call (which sets up what the
    capture must not: the op's window lookup, its kernels' module)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def gpu_timeout_in_replay(ctx):
    """A captured barrier replays fine on both ranks, then rank 0 replays it alone: the
    timeout surfaces at its next synchronize."""
    hdl = _ready_window(ctx)
    graph = _graph_of(lambda: hdl.barrier(channel=1, timeout_ms=1000))
    graph.replay()
    ctx.sync()
    dist.barrier()
    if ctx.rank != 0:
        dist.barrier()  # alive until rank 0 is done (see gpu_timeout_alone)
        ctx.exit_code = 0
        return {"rank": ctx.rank, "idle": True}
    start = time.monotonic()
    graph.replay()
    out = _after_device_timeout(ctx, hdl, start)
    dist.barrier()
    return out


def gpu_signal_soak(ctx):
    """args["rounds"] rounds of barrier + put/wait in a ring, eager and then as CUDA
    graph replays, all in time: nothing may raise."""
    rounds, per_graph, limit = ctx.args["rounds"], 100, 10000
    hdl = _ready_window(ctx)
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world

    def run(n):
        for i in range(n):
            hdl.barrier(channel=i % 4, timeout_ms=limit)
            hdl.put_signal(nxt, channel=4 + i % 4, timeout_ms=limit)
            hdl.wait_signal(prv, channel=4 + i % 4, timeout_ms=limit)

    start = time.monotonic()
    run(rounds)
    ctx.sync()
    eager_s = time.monotonic() - start
    graph = _graph_of(lambda: run(per_graph))
    replays = max(1, rounds // per_graph)
    start = time.monotonic()
    for _ in range(replays):
        graph.replay()
    ctx.sync()
    graph_s = time.monotonic() - start
    hdl.barrier(channel=0)
    ctx.sync()
    pad = hdl.get_signal_pad(ctx.rank, (symm_mem.get_signal_pad_size() // 4,), torch.int32)
    return {
        "eager_rounds": rounds,
        "graph_rounds": replays * per_graph,
        "eager_s": round(eager_s, 2),
        "graph_s": round(graph_s, 2),
        "pad_zero_at_rest": bool((pad == 0).all()),
    }


def group_timeout(ctx):
    """A rendezvous that one rank never joins: rank 0 gives up after the process
    group's timeout (not symmwin's default minute) with symmwin.TimeoutError."""
    store = dist.distributed_c10d._get_default_store()
    if ctx.rank == 1:
        # Stay out of the rendezvous until rank 0 has given up.
        deadline = time.monotonic() + 60
        while not store.check(["gave_up"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        return None
    t = _p2p(ctx, 64)
    start = time.monotonic()
    try:
        symm_mem.rendezvous(t, dist.group.WORLD.group_name)
    except symmwin.TimeoutError as e:
        caught = {
            "message": str(e),
            "is_dist_backend_error": isinstance(e, dist.DistBackendError),
            "is_runtime_error": isinstance(e, RuntimeError),
        }
    else:
        raise AssertionError("rendezvous without rank 1 did not time out")
    caught["seconds"] = time.monotonic() - start
    store.set("gave_up", "1")
    return caught
