"""Scenarios for torch.ops.symmwin.* (run by worker.py through scenarios.py).

The reference is a plain Python model: every rank rebuilds every rank's inputs from
the same seeds, so it knows exactly what it must receive without trusting any
collective. `dist.all_to_all_single` (gloo) checks the model itself for float32.
"""

from __future__ import annotations

import random

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

import symmwin.ops as ops

DTYPES = {
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
HIDDEN = 5  # odd row length: rows of 5 elements


def _group() -> str:
    return dist.group.WORLD.group_name


def _rows(seed: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 250, (n, HIDDEN), generator=g).to(dtype)


def _splits(pattern: str, seed: int, src: int, world: int, n: int) -> list[int]:
    """Rows rank `src` sends to each of the `n` destinations (ranks or experts)."""
    rng = random.Random(seed * 1000 + src)
    if pattern == "silent" and src == 0:
        return [0] * n
    if pattern == "all_to_one":
        return [rng.randint(1, 7) if d == n - 1 else 0 for d in range(n)]
    return [rng.choice([0, 0, 1, 2, 3, 5, 7, 11]) for _ in range(n)]


def _sym(ctx, shape, dtype) -> torch.Tensor:
    return symm_mem.empty(shape, dtype=dtype, device=ctx.device)


def _prefix(values: list[int]) -> list[int]:
    out, acc = [], 0
    for v in values:
        out.append(acc)
        acc += v
    return out


def _case(ctx, dtype_name: str, pattern: str, experts: int, seed: int):
    """Every rank's splits and input rows, and the symmetric capacities."""
    W, E = ctx.world, experts
    dtype = DTYPES[dtype_name]
    splits = [_splits(pattern, seed, s, W, W * E) for s in range(W)]
    data = [_rows(seed * 7919 + s, sum(splits[s]), dtype) for s in range(W)]
    return splits, data


def ops_a2a_vdev(ctx):
    """all_to_all_vdev over dtypes and split patterns, against the model."""
    results = []
    W, me = ctx.world, ctx.rank
    for seed, (dtype_name, pattern) in enumerate(
        (d, p) for d in DTYPES for p in ("random", "silent", "all_to_one")
    ):
        splits, data = _case(ctx, dtype_name, pattern, 1, seed)
        dtype = DTYPES[dtype_name]
        recv = [splits[s][me] for s in range(W)]
        in_cap = max(1, max(sum(s) for s in splits)) + 1
        out_cap = max(1, max(sum(splits[s][d] for s in range(W)) for d in range(W))) + 1
        inp = _sym(ctx, (in_cap, HIDDEN), dtype)
        out = _sym(ctx, (out_cap, HIDDEN), dtype)
        in_splits = _sym(ctx, (W,), torch.int64)
        out_so = _sym(ctx, (2, W), torch.int64)
        inp[: len(data[me])].copy_(data[me])
        in_splits.copy_(torch.tensor(splits[me]))
        out.fill_(0)
        torch.ops.symmwin.all_to_all_vdev(inp, out, in_splits, out_so, _group())
        expected = torch.cat([data[s][_prefix(splits[s])[me] :][: recv[s]] for s in range(W)])
        assert out_so[0].tolist() == recv, (out_so[0].tolist(), recv)
        assert out_so[1].tolist() == _prefix(recv), (out_so[1].tolist(), _prefix(recv))
        assert torch.equal(out[: sum(recv)].cpu(), expected), (dtype_name, pattern)
        assert in_splits.tolist() == splits[me], "in_splits must not change"
        if dtype == torch.float32:
            # The model agrees with torch's own all-to-all-v.
            ref = torch.empty(sum(recv), HIDDEN, dtype=dtype)
            dist.all_to_all_single(ref, data[me], recv, splits[me])
            assert torch.equal(ref, expected)
        results.append((dtype_name, pattern, sum(recv)))
    return results


def _dispatch_expected(splits, data, me, W, E, align):
    recv, offsets, chunks, start = [], [], [], 0
    for e in range(E):
        block = [splits[s][me * E + e] for s in range(W)]
        pre = _prefix(block)
        for s in range(W):
            recv.append(block[s])
            offsets.append(start + pre[s])
            first = _prefix(splits[s])[me * E + e]
            chunks.append(data[s][first : first + block[s]])
        total = sum(block)
        start += max(-(-total // align) * align, align)
    return recv, offsets, chunks, start


def ops_a2a_2d(ctx):
    """Dispatch (all_to_all_vdev_2d) then combine (all_to_all_vdev_2d_offset) back,
    for each major_align, dtype and pattern; combine must restore the input."""
    W, me = ctx.world, ctx.rank
    E = ctx.args.get("experts", 3)
    results = []
    cases = [(a, d, p) for a in (1, 8, 128) for d in DTYPES for p in ("random", "silent", "all_to_one")]
    for seed, (align, dtype_name, pattern) in enumerate(cases):
        splits, data = _case(ctx, dtype_name, pattern, E, 100 + seed)
        dtype = DTYPES[dtype_name]
        in_cap = max(sum(s) for s in splits) + 1
        needs = [_dispatch_expected(splits, data, d, W, E, align)[3] for d in range(W)]
        out_cap = max(needs) + 1
        inp = _sym(ctx, (in_cap, HIDDEN), dtype)
        out = _sym(ctx, (out_cap, HIDDEN), dtype)
        back = _sym(ctx, (in_cap, HIDDEN), dtype)
        in_splits = _sym(ctx, (W * E,), torch.int64)
        out_so = _sym(ctx, (2, W * E), torch.int64)
        back_so = _sym(ctx, (2, W * E), torch.int64)
        inp[: len(data[me])].copy_(data[me])
        in_splits.copy_(torch.tensor(splits[me]))
        torch.ops.symmwin.all_to_all_vdev_2d(inp, out, in_splits, out_so, _group(), major_align=align)
        recv, offsets, chunks, _ = _dispatch_expected(splits, data, me, W, E, align)
        assert out_so[0].tolist() == recv, (align, pattern, out_so[0].tolist(), recv)
        assert out_so[1].tolist() == offsets, (align, pattern, out_so[1].tolist(), offsets)
        for i, chunk in enumerate(chunks):
            assert torch.equal(out[offsets[i] : offsets[i] + recv[i]].cpu(), chunk), (align, i)
        # Combine: the dispatch output and its splits/offsets go straight back.
        back.fill_(0)
        torch.ops.symmwin.all_to_all_vdev_2d_offset(out, back, out_so, back_so, _group())
        sent = sum(splits[me])
        assert back_so[0].tolist() == splits[me]
        assert back_so[1].tolist() == _prefix(splits[me])
        assert torch.equal(back[:sent].cpu(), data[me]), (align, dtype_name, pattern)
        results.append((align, dtype_name, pattern, sum(recv)))
    return results


def ops_host_sized(ctx):
    """all_to_all (and its functional form), broadcast from every root."""
    W, me = ctx.world, ctx.rank
    checks = []
    for dtype_name, dtype in DTYPES.items():
        per = 3  # odd block
        inp = _sym(ctx, (W * per,), dtype)
        out = _sym(ctx, (W * per,), dtype)
        inp.copy_(torch.arange(W * per).to(dtype) + me)
        ret = torch.ops.symmwin.all_to_all(inp, out, _group())
        assert ret.data_ptr() == out.data_ptr()
        want = torch.cat([(torch.arange(W * per).to(dtype) + s)[me * per : (me + 1) * per] for s in range(W)])
        assert torch.equal(out.cpu(), want), dtype_name
        out.fill_(0)
        ops.all_to_all_into(inp, out, _group(), engine="sm")
        assert torch.equal(out.cpu(), want)
        # engine= holds for one call: the thread's setting is back afterwards, also
        # inside an engine() block and after a call that raised.
        assert ops.get_engine() == "default"
        with ops.engine("copy_engine"):
            ops.all_to_all_into(inp, out, _group(), engine="sm")
            assert ops.get_engine() == "copy_engine"
        assert ops.get_engine() == "default"
        try:
            ops.all_to_all_into(inp, out[:1], _group(), engine="sm")
        except RuntimeError:
            pass
        else:
            raise AssertionError("a one-element out was accepted")
        assert ops.get_engine() == "default"
        for root in range(W):
            buf = _sym(ctx, (7,), dtype)
            buf.fill_(me + 1)
            r = torch.ops.symmwin.broadcast(buf, root, _group())
            assert r.data_ptr() == buf.data_ptr()
            assert torch.equal(buf.cpu(), torch.full((7,), root + 1).to(dtype)), (dtype_name, root)
        checks.append(dtype_name)
    return checks


def ops_tiles(ctx):
    """tile_reduce to every root on strided views; multi_root_tile_reduce."""
    W, me = ctx.world, ctx.rank
    done = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        base = _sym(ctx, (6, 10), dtype)
        out_base = _sym(ctx, (6, 10), dtype)
        tile = base[1:5, 2:7]  # strided 4 x 5 view, unit inner stride
        out_tile = out_base[1:5, 2:7]

        def value(r):
            return (torch.arange(20, dtype=torch.float32).reshape(4, 5) * (r + 1) / 8).to(dtype)

        tile.copy_(value(me).to(tile.device))
        want = sum(value(r).float() for r in range(W))
        for root in range(W):
            out_base.fill_(-1)
            torch.ops.symmwin.tile_reduce(tile, out_tile, root, _group())
            if me == root:
                torch.testing.assert_close(out_tile.float().cpu(), want, rtol=2e-2, atol=1e-2)
            else:
                assert (out_tile == -1).all(), "a non-root's out_tile must not change"
            # Only the tile is written, never the rest of the base tensor.
            assert (out_base[0] == -1).all() and (out_base[:, :2] == -1).all()
        # Every rank a root of its own tile.
        ins = [_sym(ctx, (4, 5), dtype) for _ in range(W)]
        for i, t in enumerate(ins):
            t.copy_((value(me) + i).to(t.device))
        out = _sym(ctx, (4, 5), dtype)
        torch.ops.symmwin.multi_root_tile_reduce(ins, out, list(range(W)), _group())
        torch.testing.assert_close(
            out.float().cpu(), sum((value(r) + me).float() for r in range(W)), rtol=2e-2, atol=5e-2
        )
        done.append(str(dtype))
    return done


def _host_barrier(ctx) -> None:
    """A gloo barrier after this rank's device work is done: gloo orders only the
    host, and a peer that reads our memory next must see what our stream wrote."""
    ctx.sync()
    dist.barrier()


def ops_one_sided(ctx):
    """put / get / put_with_signal / wait_for_signal / put_signal / wait_signal
    between every ordered pair of ranks, a rank to itself included."""
    W, me = ctx.world, ctx.rank
    n = 33
    pairs = []
    bufs = [_sym(ctx, (n,), torch.float32) for _ in range(W)]
    # One-sided ops need a window: rendezvous (collective) on every rank first, as
    # torch's own tests do before nvshmem_put.
    for b in bufs:
        symm_mem.rendezvous(b, _group())
    for dst in range(W):
        bufs[me].fill_(me * 100 + dst)
        torch.ops.symmwin.put(bufs[me], dst)
        _host_barrier(ctx)
        if me == dst:
            for src in range(W):
                assert (bufs[src] == src * 100 + dst).all(), ("put", src, dst, bufs[src].tolist())
        _host_barrier(ctx)
    g = _sym(ctx, (n,), torch.int64)
    symm_mem.rendezvous(g, _group())
    for src in range(W):
        g.fill_(me)
        _host_barrier(ctx)
        torch.ops.symmwin.get(g, src)
        assert (g == src).all(), ("get", src)
        _host_barrier(ctx)
    data = _sym(ctx, (n,), torch.float32)
    hdl = symm_mem.rendezvous(data, _group())
    pad = hdl.get_signal_pad(me)
    for src in range(W):
        for dst in range(W):
            if me == src:
                data.fill_(src * 10 + dst)
                torch.ops.symmwin.put_with_signal(data, pad, 5 + src, dst)
            if me == dst:
                torch.ops.symmwin.wait_for_signal(pad, 5 + src, src)
                assert (data == src * 10 + dst).all(), ("put_with_signal", src, dst)
            _host_barrier(ctx)
            pairs.append((src, dst))
    assert (pad == 0).all(), "wait_for_signal must leave the pad zero"
    landing = _sym(ctx, (n,), torch.float32)
    lhdl = symm_mem.rendezvous(landing, _group())
    for src in range(W):
        for dst in range(W):
            if me == src:
                ops.put_signal(torch.full((n,), src * 1000.0 + dst, device=ctx.device), lhdl, dst)
            if me == dst:
                ops.wait_signal(lhdl, src)
                assert (landing == src * 1000 + dst).all(), ("put_signal", src, dst)
            _host_barrier(ctx)
    assert (lhdl.get_signal_pad(me) == 0).all()
    return len(pairs)


def ops_soak(ctx):
    """1,000 all_to_all_vdev calls in a row, interleaved with barrier(); the pads are
    zero at the end."""
    W, me = ctx.world, ctx.rank
    calls = ctx.args.get("calls", 1000)
    inp = _sym(ctx, (W * 4, 2), torch.float32)
    out = _sym(ctx, (W * 4, 2), torch.float32)
    in_splits = _sym(ctx, (W,), torch.int64)
    out_so = _sym(ctx, (2, W), torch.int64)
    hdl = symm_mem.rendezvous(inp, _group())
    for i in range(calls):
        splits = [(i + me + d) % 4 for d in range(W)]
        in_splits.copy_(torch.tensor(splits))
        inp.copy_(torch.arange(W * 8, dtype=torch.float32).reshape(-1, 2) + i)
        torch.ops.symmwin.all_to_all_vdev(inp, out, in_splits, out_so, _group())
        want = [(i + s + me) % 4 for s in range(W)]
        assert out_so[0].tolist() == want, (i, out_so[0].tolist(), want)
        if i % 2 == 0:
            hdl.barrier(channel=i % 4)
    pads = [symm_mem.rendezvous(t, _group()).get_signal_pad(me) for t in (inp, out, in_splits, out_so)]
    assert all((p == 0).all() for p in pads), "signal pads must be zero at rest"
    return calls


def _error(fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except (RuntimeError, ValueError) as e:
        return str(e)
    raise AssertionError(f"{fn} did not raise")


def ops_bad_input(ctx):
    """Every bad argument is a clear error; received splits larger than out move
    nothing and name the peer, the rows and the room."""
    W, me = ctx.world, ctx.rank
    g = _group()
    a2a = torch.ops.symmwin.all_to_all_vdev
    inp = _sym(ctx, (16, 4), torch.float32)
    out = _sym(ctx, (16, 4), torch.float32)
    in_splits = _sym(ctx, (W,), torch.int64)
    out_so = _sym(ctx, (2, W), torch.int64)
    in_splits.fill_(1)
    msgs = {
        "plain": _error(a2a, torch.zeros(16, 4, device=ctx.device), out, in_splits, out_so, g),
        "dtype": _error(a2a, inp, _sym(ctx, (16, 4), torch.float64), in_splits, out_so, g),
        "contiguous": _error(a2a, inp, out.t(), in_splits, out_so, g),
        "splits_dtype": _error(a2a, inp, out, _sym(ctx, (W,), torch.int32), out_so, g),
        "splits_shape": _error(a2a, inp, out, _sym(ctx, (W + 1,), torch.int64), _sym(ctx, (2, W + 1), torch.int64), g),
        "out_so_shape": _error(a2a, inp, out, in_splits, _sym(ctx, (3, W), torch.int64), g),
        "align_zero": _error(
            torch.ops.symmwin.all_to_all_vdev_2d, inp, out, in_splits, out_so, g, major_align=0
        ),
        "align_negative": _error(
            torch.ops.symmwin.all_to_all_vdev_2d, inp, out, in_splits, out_so, g, major_align=-8
        ),
        "reduce_op": _error(
            torch.ops.symmwin.tile_reduce, inp[:2], out[:2], 0, g, "max"
        ),
        "inner_stride": _error(torch.ops.symmwin.tile_reduce, inp[:, ::2], out[:, ::2], 0, g),
        "int_tile": _error(
            torch.ops.symmwin.tile_reduce, _sym(ctx, (2, 2), torch.int64), _sym(ctx, (2, 2), torch.int64), 0, g
        ),
        "peer": _error(torch.ops.symmwin.put, inp, W),
        "no_window": _error(torch.ops.symmwin.put, _sym(ctx, (4,), torch.float32), 0),
        "engine": _error(ops.set_engine, "dma"),
        "splits_len": _error(a2a, inp, out, _sym(ctx, (W + 1,), torch.int64), out_so, g),
    }
    msgs.update(_wide_ranks(ctx, inp, out))
    msgs.update(_aliased(ctx))
    # Every rank sends 3 rows to rank 0, whose out (a 2-row view) has no room: rank 0
    # raises naming a peer, the other ranks complete, nothing is written on rank 0.
    # (On CUDA the splits are seen on the device only and the failure surfaces at a
    # later synchronization: the GPU tests of the CUDA kernels cover it.)
    big = _sym(ctx, (8, 4), torch.float32)
    big.fill_(-7)
    small = big[:2]
    in_splits.copy_(torch.tensor([3] + [0] * (W - 1)))
    inp.fill_(me)
    if ctx.is_cuda:
        pass
    elif me == 0:
        msgs["room"] = _error(a2a, inp, small, in_splits, out_so, g)
        assert (big == -7).all(), "an op that fails must write nothing"
    else:
        a2a(inp, small, in_splits, out_so, g)
        assert out_so[0].tolist() == [0] * W
    # The group is still in step: a good call works on every rank afterwards.
    in_splits.fill_(1)
    a2a(inp, out, in_splits, out_so, g)
    assert out[:W, 0].tolist() == [float(s) for s in range(W)]
    return msgs


def _wide_ranks(ctx, inp, out) -> dict:
    """Ranks that a 32-bit narrowing would turn into valid ones (2**32 + k is k)."""
    import time

    g, me = _group(), ctx.rank
    hdl = symm_mem.rendezvous(inp, g)
    wide = 2**32 + 1
    msgs = {
        "put_wide": _error(torch.ops.symmwin.put, inp, wide),
        "get_negative": _error(torch.ops.symmwin.get, inp, -1),
        "broadcast_wide": _error(torch.ops.symmwin.broadcast, inp, 2**32, g),
        "tile_root_wide": _error(torch.ops.symmwin.tile_reduce, inp[:2], out[:2], 2**32, g),
        "put_signal_wide": _error(ops.put_signal, inp[0], hdl, wide),
        "wait_signal_wide": _error(ops.wait_signal, hdl, wide),
        "put_with_signal_wide": _error(
            torch.ops.symmwin.put_with_signal, inp, hdl.get_signal_pad(me, (1,), dtype=torch.int64), 1, wide
        ),
        "wait_for_signal_wide": _error(
            torch.ops.symmwin.wait_for_signal, hdl.get_signal_pad(me, (1,), dtype=torch.int64), 1, wide
        ),
    }
    # Memory no peer can signal is refused at once, not waited on.
    started = time.monotonic()
    plain = torch.zeros(4, dtype=torch.int64, device=ctx.device)
    msgs["wait_for_signal_plain"] = _error(torch.ops.symmwin.wait_for_signal, plain, 1, 0)
    msgs["wait_for_signal_plain_s"] = f"{time.monotonic() - started:.3f}"
    return msgs


def _aliased(ctx) -> dict:
    """all_to_all whose out is its input, or overlaps it; at world 2 and more, an
    element count that does not split evenly among the ranks."""
    W, g = ctx.world, _group()
    x = _sym(ctx, (8 * W,), torch.float32)
    msgs = {
        "a2a_alias": _error(torch.ops.symmwin.all_to_all_into, x, x, g),
        "a2a_overlap": _error(torch.ops.symmwin.all_to_all_into, x[: 4 * W], x[2 * W : 6 * W], g),
    }
    if W > 1:
        odd_in, odd_out = _sym(ctx, (2 * W + 1,), torch.float32), _sym(ctx, (2 * W + 1,), torch.float32)
        msgs["a2a_elements"] = _error(torch.ops.symmwin.all_to_all_into, odd_in, odd_out, g)
    return msgs


def ops_compiled(ctx):
    """The ops that return nothing trace under torch.compile (fake kernels) and give
    the eager results."""
    W, me = ctx.world, ctx.rank
    g = _group()
    inp = _sym(ctx, (W * 2, 3), torch.float32)
    out = _sym(ctx, (W * 2 + 8, 3), torch.float32)
    in_splits = _sym(ctx, (W,), torch.int64)
    out_so = _sym(ctx, (2, W), torch.int64)
    a2a_in = _sym(ctx, (W * 4,), torch.float32)
    a2a_out = _sym(ctx, (W * 4,), torch.float32)

    def step():
        # Symmetric buffers are written in place by peers: they enter the graph as
        # inputs the ops mutate, never as functional copies (so no copy_ in here).
        torch.ops.symmwin.all_to_all_vdev(inp, out, in_splits, out_so, g)
        torch.ops.symmwin.all_to_all_into(a2a_in, a2a_out, g)
        return out[: W * 2] * 2, a2a_out + 1

    in_splits.fill_(2)
    a2a_in.copy_(torch.arange(W * 4, dtype=torch.float32) + 10 * me)
    inp.copy_(torch.arange(W * 6, dtype=torch.float32).reshape(W * 2, 3) + 100 * me)
    eager = [t.clone() for t in step()]
    out.fill_(0)
    a2a_out.fill_(0)
    # Inductor re-inplaces the mutated buffers (aot_eager would run the op on clones,
    # which are not symmetric memory).
    fn = torch.compile(step, fullgraph=True)
    traced = fn()
    assert all(torch.equal(a, b) for a, b in zip(eager, traced)), (eager, traced)
    assert out_so[0].tolist() == [2] * W
    return [t.tolist() for t in traced][0][0]


def ops_same_as_torch(ctx):
    """The same inputs through torch's NVSHMEM ops (args impl="symm_mem", run with
    torch_backend) or through ours (impl="symmwin"); returns every output for the
    test to compare."""
    W, me = ctx.world, ctx.rank
    if ctx.args["impl"] == "symm_mem":
        symm_mem.set_backend("NVSHMEM")
        ns, a2a_name, bcast_name = torch.ops.symm_mem, "nvshmem_all_to_all", "nvshmem_broadcast"
    else:
        ns, a2a_name, bcast_name = torch.ops.symmwin, "all_to_all", "broadcast"
    g = _group()
    E, align = 4, 8
    splits, data = _case(ctx, "float32", "random", E, 4242)
    inp = _sym(ctx, (max(sum(s) for s in splits) + 1, HIDDEN), torch.float32)
    out = _sym(ctx, (W * 11 * W * E + E * align, HIDDEN), torch.float32)
    back = _sym(ctx, (inp.shape[0], HIDDEN), torch.float32)
    in_splits = _sym(ctx, (W * E,), torch.int64)
    out_so = _sym(ctx, (2, W * E), torch.int64)
    back_so = _sym(ctx, (2, W * E), torch.int64)
    inp[: len(data[me])].copy_(data[me])
    in_splits.copy_(torch.tensor(splits[me]))
    ns.all_to_all_vdev_2d(inp, out, in_splits, out_so, g, major_align=align)
    ns.all_to_all_vdev_2d_offset(out, back, out_so, back_so, g)
    so = out_so.tolist()
    rows = [out[o : o + n].cpu().tolist() for n, o in zip(so[0], so[1])]
    flat_splits = _sym(ctx, (W,), torch.int64)
    flat_so = _sym(ctx, (2, W), torch.int64)
    flat_splits.copy_(torch.tensor(splits[me][:W]))
    ns.all_to_all_vdev(inp, out, flat_splits, flat_so, g)
    flat = out[: int(flat_so[0].sum())].cpu().tolist()
    eq_in = _sym(ctx, (W * 6,), torch.bfloat16)
    eq_out = _sym(ctx, (W * 6,), torch.bfloat16)
    eq_in.copy_(torch.arange(W * 6) + me)
    getattr(ns, a2a_name)(eq_in, eq_out, g)
    bc = _sym(ctx, (9,), torch.float32)
    bc.fill_(me + 0.5)
    getattr(ns, bcast_name)(bc, W - 1, g)
    tile = _sym(ctx, (4, 16), torch.bfloat16)
    tile.copy_((torch.arange(64).reshape(4, 16) * (me + 1) / 16).to(torch.bfloat16))
    tout = _sym(ctx, (4, 16), torch.bfloat16)
    tout.zero_()
    ns.tile_reduce(tile, tout, 0, g)
    ctx.sync()
    return {
        "out_splits_offsets": so,
        "rows": rows,
        "back": back[: sum(splits[me])].cpu().tolist(),
        "back_splits_offsets": back_so.tolist(),
        "flat": flat,
        "flat_splits_offsets": flat_so.tolist(),
        "all_to_all": eq_out.float().cpu().tolist(),
        "broadcast": bc.cpu().tolist(),
        "tile_reduce": tout.float().cpu().tolist() if me == 0 else None,
    }


def ops_disagree(ctx):
    """The last rank passes other operands than the others, each case one call on
    every rank: float64 x 4 per peer against float32 x 8 (the same bytes) in
    all_to_all ("dtype"), int32 against float32 of one size ("same_size"), rows of
    float32 x 4 against float64 x 2 in all_to_all_vdev ("rows"), int32 against
    float32 in broadcast ("broadcast_dtype"), 4 elements per peer against 8
    ("count", a view of the same allocation), and its own rank as the root of a
    broadcast ("root"). Every rank raises, naming the ranks that differ; a good call
    afterwards works (the group is still in step)."""
    W, me, g = ctx.world, ctx.rank, _group()
    odd = me == W - 1
    caught = {}
    dtype, per = (torch.float64, 4) if odd else (torch.float32, 8)
    inp, out = _sym(ctx, (W * per,), dtype), _sym(ctx, (W * per,), dtype)
    inp.fill_(me + 1)
    caught["dtype"] = _error(torch.ops.symmwin.all_to_all, inp, out, g)
    same = torch.int32 if odd else torch.float32
    inp, out = _sym(ctx, (W * 8,), same), _sym(ctx, (W * 8,), same)
    inp.fill_(me + 1)
    caught["same_size"] = _error(torch.ops.symmwin.all_to_all, inp, out, g)
    row_dtype, width = (torch.float32, 4) if odd else (torch.float64, 2)
    rows_in, rows_out = _sym(ctx, (W, width), row_dtype), _sym(ctx, (W, width), row_dtype)
    in_splits, out_so = _sym(ctx, (W,), torch.int64), _sym(ctx, (2, W), torch.int64)
    in_splits.fill_(1)
    caught["rows"] = _error(torch.ops.symmwin.all_to_all_vdev, rows_in, rows_out, in_splits, out_so, g)
    typed = _sym(ctx, (16,), torch.int32 if odd else torch.float32)
    typed.fill_(me + 1)
    caught["broadcast_dtype"] = _error(torch.ops.symmwin.broadcast, typed, 0, g)
    inp, out = _sym(ctx, (W * 8,), torch.float32), _sym(ctx, (W * 8,), torch.float32)
    n = W * 4 if odd else W * 8
    caught["count"] = _error(torch.ops.symmwin.all_to_all, inp[:n], out[:n], g)
    buf = _sym(ctx, (16,), torch.float32)
    buf.fill_(me + 1)
    caught["root"] = _error(torch.ops.symmwin.broadcast, buf, me if odd else 0, g)
    torch.ops.symmwin.broadcast(buf, 0, g)
    assert torch.equal(buf.cpu(), torch.full((16,), 1.0)), "in step after the disagreement"
    torch.ops.symmwin.all_to_all(inp, out, g)
    return caught


def ops_timeouts(ctx):
    """CPU, SYMMWIN_TIMEOUT_MS short: rank 0 calls a collective op and a
    wait_for_signal that no peer answers; both raise symmwin.TimeoutError naming rank
    0. The other ranks keep out until rank 0 is done."""
    import time

    import symmwin

    store = dist.distributed_c10d._get_default_store()
    W, me, g = ctx.world, ctx.rank, _group()
    inp, out = _sym(ctx, (4 * W,), torch.float32), _sym(ctx, (4 * W,), torch.float32)
    hdl = symm_mem.rendezvous(inp, g)
    symm_mem.rendezvous(out, g)
    if me != 0:
        deadline = time.monotonic() + 60
        while not store.check(["ops_timeouts_done"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        return None
    calls = {
        "all_to_all_into": lambda: torch.ops.symmwin.all_to_all_into(inp, out, g),
        "wait_for_signal": lambda: torch.ops.symmwin.wait_for_signal(hdl.get_signal_pad(0), 7, W - 1),
    }
    caught = {}
    for name, call in calls.items():
        try:
            call()
        except symmwin.TimeoutError as e:
            caught[name] = str(e)
        else:
            raise AssertionError(f"{name} without its peers did not time out")
    store.set("ops_timeouts_done", "1")
    return caught
