"""GPU-only scenarios for torch.ops.symmwin.* (run by worker.py as
"ops_gpu_scenarios:<name>"): CUDA graph capture with splits that change between
replays, both engines of the host-sized ops, long runs interleaved with barrier() and
torch's one_shot_all_reduce, received splits that overflow `out` and sent splits
that do not fit the input (the device traps), and the same inputs through torch's
NVSHMEM ops for comparison.

Every rank rebuilds every rank's splits and rows from the same seeds, so it knows what
it must receive without trusting any collective."""

from __future__ import annotations

import random

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

HIDDEN = 8  # elements per row (16-byte rows in bf16: the vector path)


def _group() -> str:
    return dist.group.WORLD.group_name


def _sym(ctx, shape, dtype) -> torch.Tensor:
    return symm_mem.empty(shape, dtype=dtype, device=ctx.device)


def _splits(seed: int, src: int, n: int, zeros: bool = True) -> list[int]:
    rng = random.Random(seed * 7919 + src)
    choices = [0, 0, 1, 2, 3, 5, 7, 13] if zeros else [1, 2, 3, 5, 7, 13]
    return [rng.choice(choices) for _ in range(n)]


def _rows(seed: int, src: int, n: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 104729 + src)
    return torch.randint(-100, 100, (n, HIDDEN), generator=g).to(dtype)


def _prefix(values):
    out, acc = [], 0
    for v in values:
        out.append(acc)
        acc += v
    return out


def _aligned(rows: int, align: int) -> int:
    return max(-(-rows // align) * align, align)


def dispatch_model(splits, data, me, W, E, align):
    """What rank `me` receives from all_to_all_vdev_2d: (out_splits, out_offsets,
    [(out_row, rows tensor)])."""
    offs = [_prefix(splits[s]) for s in range(W)]
    out_splits, out_offsets, chunks = [], [], []
    start = 0
    for e in range(E):
        row = start
        for s in range(W):
            i = me * E + e
            n = splits[s][i]
            out_splits.append(n)
            out_offsets.append(row)
            chunks.append((row, data[s][offs[s][i] : offs[s][i] + n]))
            row += n
        start += _aligned(row - start, align)
    return out_splits, out_offsets, chunks


def _check_chunks(out, chunks, what):
    for row, want in chunks:
        got = out[row : row + want.shape[0]].cpu()
        assert torch.equal(got, want), (what, row)


# ---------------------------------------------------------------------------------


def graph_replay(ctx):
    """MoE dispatch + combine and an equal all_to_all captured once in a CUDA graph,
    replayed with new splits and new rows every time (splits never leave the device);
    every third seed one rank sends nothing. args: replays, experts (per rank)."""
    W, me, E, align = ctx.world, ctx.rank, ctx.args.get("experts", 2), 8
    dtype = torch.bfloat16
    cap = W * E * 13
    inp = _sym(ctx, (cap, HIDDEN), dtype)
    out = _sym(ctx, (W * E * 13 + E * align, HIDDEN), dtype)
    back = _sym(ctx, (cap, HIDDEN), dtype)
    in_splits = _sym(ctx, (W * E,), torch.int64)
    out_so = _sym(ctx, (2, W * E), torch.int64)
    back_so = _sym(ctx, (2, W * E), torch.int64)
    eq_in = _sym(ctx, (W * 1024,), torch.float32)
    eq_out = _sym(ctx, (W * 1024,), torch.float32)
    g = _group()

    def step():
        torch.ops.symmwin.all_to_all_vdev_2d(inp, out, in_splits, out_so, g, align)
        torch.ops.symmwin.all_to_all_vdev_2d_offset(out, back, out_so, back_so, g)
        torch.ops.symmwin.all_to_all(eq_in, eq_out, g)

    def load(seed):
        splits = [_splits(seed, s, W * E) for s in range(W)]
        if seed % 3 == 0:
            splits[seed % W] = [0] * (W * E)
        data = [_rows(seed, s, sum(splits[s]), dtype) for s in range(W)]
        in_splits.copy_(torch.tensor(splits[me]))
        inp.zero_()
        inp[: data[me].shape[0]].copy_(data[me])
        eq_in.copy_(torch.arange(W * 1024, dtype=torch.float32) * (seed + 1) + me)
        return splits, data

    def check(seed, splits, data):
        want_splits, want_offsets, chunks = dispatch_model(splits, data, me, W, E, align)
        assert out_so[0].tolist() == want_splits, ("splits", seed)
        assert out_so[1].tolist() == want_offsets, ("offsets", seed)
        _check_chunks(out, chunks, ("dispatch", seed))
        n = data[me].shape[0]
        assert torch.equal(back[:n].cpu(), data[me]), ("combine", seed)
        want = torch.cat([(torch.arange(W * 1024) * (seed + 1) + s)[me * 1024 : (me + 1) * 1024] for s in range(W)])
        assert torch.equal(eq_out.cpu(), want.float()), ("all_to_all", seed)

    splits, data = load(0)
    step()  # eager warm-up: loads the kernels and caches the handles before capture
    torch.cuda.synchronize()
    check(0, splits, data)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    replays = ctx.args.get("replays", 20)
    for seed in range(1, replays + 1):
        splits, data = load(seed)
        graph.replay()
        torch.cuda.synchronize()
        check(seed, splits, data)
    return replays


def engines(ctx):
    """all_to_all, broadcast, put and get on each engine, small and large."""
    import symmwin.ops as ops

    W, me = ctx.world, ctx.rank
    g = _group()
    done = []
    sizes = ctx.args.get("sizes", [4096, 1 << 20, 17 << 20])
    for engine in ("sm", "copy_engine", "auto"):
        for per_peer in sizes:
            n = per_peer // 4
            inp = _sym(ctx, (W * n,), torch.float32)
            out = _sym(ctx, (W * n,), torch.float32)
            inp.copy_(torch.arange(W * n, dtype=torch.float32) + me * 0.5)
            out.fill_(-1)
            ops.all_to_all(inp, out, g, engine=engine)
            want = torch.cat([torch.arange(W * n, dtype=torch.float32)[me * n : (me + 1) * n] + s * 0.5 for s in range(W)])
            assert torch.equal(out.cpu(), want), ("all_to_all", engine, per_peer)
            for root in range(W):
                inp.fill_(me + 1)
                ops.broadcast(inp, root, g, engine=engine)
                assert bool((inp == root + 1).all()), ("broadcast", engine, per_peer, root)
            for peer in range(W):
                out.fill_(me)
                torch.cuda.synchronize()  # gloo's barrier does not wait for the stream
                dist.barrier()
                ops.get(out, peer, engine=engine)
                assert bool((out == peer).all()), ("get", engine, per_peer, peer)
                dist.barrier()
            del inp, out
            done.append((engine, per_peer))
    # put: every rank sends its own buffer (one per rank, so no put lands in a buffer
    # that is still being sent) into the next rank's copy of it.
    for engine in ("sm", "copy_engine"):
        bufs = [_sym(ctx, (1 << 18,), torch.float32) for _ in range(W)]
        # One-sided ops use the window a tensor already has on the world group; the
        # rendezvous that makes it is collective, so every rank does it first.
        for b in bufs:
            symm_mem.rendezvous(b, dist.group.WORLD)
        bufs[me].fill_(me)
        torch.cuda.synchronize()
        dist.barrier()
        ops.put(bufs[me], (me + 1) % W, engine=engine)
        torch.cuda.synchronize()
        dist.barrier()
        prev = (me - 1) % W
        assert bool((bufs[prev] == prev).all()), ("put", engine)
        done.append((engine, "put"))
    return len(done)


def soak(ctx):
    """1,000 all_to_all_vdev / _2d calls in a row with random splits, interleaved with
    barrier() and torch's one_shot_all_reduce on the same group; pads zero at the end."""
    W, me = ctx.world, ctx.rank
    calls = ctx.args.get("calls", 1000)
    E = 2
    dtype = torch.float32
    cap = W * E * 13
    inp = _sym(ctx, (cap, HIDDEN), dtype)
    out = _sym(ctx, (cap + E * 8, HIDDEN), dtype)
    in_splits = _sym(ctx, (W * E,), torch.int64)
    out_so = _sym(ctx, (2, W * E), torch.int64)
    red = _sym(ctx, (1024,), torch.bfloat16)
    hdl = symm_mem.rendezvous(inp, _group())
    g = _group()
    checked = 0
    for i in range(calls):
        splits = [_splits(i, s, W * E) for s in range(W)]
        data = [_rows(i, s, sum(splits[s]), dtype) for s in range(W)]
        in_splits.copy_(torch.tensor(splits[me]))
        inp[: data[me].shape[0]].copy_(data[me])
        torch.ops.symmwin.all_to_all_vdev_2d(inp, out, in_splits, out_so, g, 8)
        if i % 10 == 0:
            want_splits, want_offsets, chunks = dispatch_model(splits, data, me, W, E, 8)
            assert out_so[0].tolist() == want_splits and out_so[1].tolist() == want_offsets, i
            _check_chunks(out, chunks, i)
            checked += 1
        if i % 3 == 0:
            hdl.barrier(channel=i % 4)
        if i % 7 == 0:
            red.fill_(me + 1)
            r = torch.ops.symm_mem.one_shot_all_reduce(red, "sum", g)
            assert bool((r == W * (W + 1) // 2).all()), ("one_shot_all_reduce", i)
    torch.cuda.synchronize()
    dist.barrier()
    pads = [symm_mem.rendezvous(t, g).get_signal_pad(me) for t in (inp, out, in_splits, out_so, red)]
    assert all(bool((p == 0).all()) for p in pads), "signal pads must be zero at rest"
    return checked


def overflow(ctx):
    """Every rank sends rank 0 more rows than its `out` holds: rank 0's device prints
    and traps before copying anything; the others time out waiting for it. On every
    rank the next synchronize raises, and the next symmwin call names what happened."""
    W, me = ctx.world, ctx.rank
    g = _group()
    inp = _sym(ctx, (16, HIDDEN), torch.float32)
    out = _sym(ctx, (16, HIDDEN), torch.float32)
    small = out[:2]
    in_splits = _sym(ctx, (W,), torch.int64)
    out_so = _sym(ctx, (2, W), torch.int64)
    in_splits.copy_(torch.tensor([3] + [0] * (W - 1)))
    first = (inp, small if me == 0 else out, in_splits, out_so, g)
    return _trap_then_next(ctx, first, (inp, out, in_splits, out_so, g))


def _trap_then_next(ctx, first, then) -> dict:
    """all_to_all_vdev with the arguments `first`, which makes a device trap, then
    with `then`: what the synchronisation after the first raised ("sync") and what the
    next call raised ("next")."""
    torch.cuda.synchronize()
    result = {}
    try:
        torch.ops.symmwin.all_to_all_vdev(*first)
        torch.cuda.synchronize()
        result["sync"] = "no error"
    except RuntimeError as e:
        result["sync"] = str(e)
    try:
        torch.ops.symmwin.all_to_all_vdev(*then)
        result["next"] = "no error"
    except RuntimeError as e:
        result["next"] = str(e)
    # The context is lost: leave at once, without torch's or the group's teardown.
    ctx.exit_code = 0
    return result


# Rank 0's in_splits for each bad_split case (16 input rows), in a world of 2.
BAD_SPLITS = {"large": [0, 17], "negative": [-1, 0], "sum": [10, 10]}


def bad_split(ctx):
    """Rank 0 sends splits its input cannot honour (args: case, a key of BAD_SPLITS):
    its device checks its own table, prints and traps before anything is sent; rank 1
    times out waiting for it or sees it exit. As in `overflow`, the next symmwin call
    names what happened."""
    W, me = ctx.world, ctx.rank
    g = _group()
    inp = _sym(ctx, (16, HIDDEN), torch.float32)
    out = _sym(ctx, (64, HIDDEN), torch.float32)
    in_splits = _sym(ctx, (W,), torch.int64)
    out_so = _sym(ctx, (2, W), torch.int64)
    in_splits.copy_(torch.tensor(BAD_SPLITS[ctx.args["case"]] if me == 0 else [1] * W))
    args = (inp, out, in_splits, out_so, g)
    return _trap_then_next(ctx, args, args)


def _nvshmem_case(ctx, namespace: str):
    """One fixed set of inputs through all_to_all_vdev, _2d, _2d_offset, all_to_all
    and broadcast in `namespace` ("symm_mem" on NVSHMEM, "symmwin" on SYMMWIN);
    returns only what the ops define (the rows they write, the split tables)."""
    ns = getattr(torch.ops, namespace)
    a2a = ns.nvshmem_all_to_all if namespace == "symm_mem" else ns.all_to_all
    bcast = ns.nvshmem_broadcast if namespace == "symm_mem" else ns.broadcast
    W, me, E = ctx.world, ctx.rank, 4
    g = _group()
    dtype = torch.bfloat16
    results = {}
    for seed in range(3):
        splits = [_splits(seed, s, W * E) for s in range(W)]
        data = [_rows(seed, s, sum(splits[s]), dtype) for s in range(W)]
        cap = max(sum(s) for s in splits) + 1
        inp = _sym(ctx, (cap, HIDDEN), dtype)
        out = _sym(ctx, (W * E * 13 + E * 16, HIDDEN), dtype)
        back = _sym(ctx, (cap, HIDDEN), dtype)
        in_splits = _sym(ctx, (W * E,), torch.int64)
        out_so = _sym(ctx, (2, W * E), torch.int64)
        back_so = _sym(ctx, (2, W * E), torch.int64)
        inp[: data[me].shape[0]].copy_(data[me])
        in_splits.copy_(torch.tensor(splits[me]))
        ns.all_to_all_vdev_2d(inp, out, in_splits, out_so, g, 16)
        ns.all_to_all_vdev_2d_offset(out, back, out_so, back_so, g)
        torch.cuda.synchronize()
        rows = [out[o : o + n].float().sum().item() for n, o in zip(out_so[0].tolist(), out_so[1].tolist())]
        n = data[me].shape[0]
        results[f"2d/{seed}"] = [out_so.tolist(), rows, back_so.tolist(), back[:n].float().sum().item()]
        flat_splits = _sym(ctx, (W,), torch.int64)
        flat_so = _sym(ctx, (2, W), torch.int64)
        flat = [_splits(seed + 10, s, W, zeros=False) for s in range(W)]
        flat_data = [_rows(seed + 10, s, sum(flat[s]), dtype) for s in range(W)]
        flat_in = _sym(ctx, (max(sum(f) for f in flat), HIDDEN), dtype)
        flat_out = _sym(ctx, (W * 13, HIDDEN), dtype)
        flat_in[: flat_data[me].shape[0]].copy_(flat_data[me])
        flat_splits.copy_(torch.tensor(flat[me]))
        ns.all_to_all_vdev(flat_in, flat_out, flat_splits, flat_so, g)
        torch.cuda.synchronize()
        got = sum(flat_so[0].tolist())
        results[f"vdev/{seed}"] = [flat_so.tolist(), flat_out[:got].float().sum().item()]
    eq_in = _sym(ctx, (W * 4096,), torch.float32)
    eq_out = _sym(ctx, (W * 4096,), torch.float32)
    eq_in.copy_(torch.arange(W * 4096, dtype=torch.float32) + me)
    a2a(eq_in, eq_out, g)
    buf = _sym(ctx, (4096,), torch.float32)
    buf.fill_(me + 3)
    bcast(buf, W - 1, g)
    torch.cuda.synchronize()
    results["all_to_all"] = eq_out.sum().item()
    results["broadcast"] = buf.sum().item()
    return results


def nvshmem_reference(ctx):
    """The comparison inputs through torch's NVSHMEM backend (`torch_backend` run)."""
    symm_mem.set_backend("NVSHMEM")
    return _nvshmem_case(ctx, "symm_mem")


def nvshmem_same_inputs(ctx):
    """The comparison inputs through symmwin."""
    return _nvshmem_case(ctx, "symmwin")
