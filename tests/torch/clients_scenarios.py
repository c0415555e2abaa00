"""What real programs do with torch's SymmetricMemory, replayed inside each rank of a
harness world (test_clients.py runs them). Each replays the calls of one program, in
that program's order, as read from its public source at the commit named in its
docstring; the code is written here, none is copied. Results are checked against
plain math.

ctx.device is "cpu" (SYMMWIN_HOST) or "cuda:<i>" (SYMMWIN); with args
{"torch_backend": True} the worker leaves torch's own backend in place, for the same
replay on torch's CUDA backend."""

from __future__ import annotations

import ctypes

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

BF16 = torch.bfloat16

# vLLM's SYMM_MEM_ALL_REDUCE_MAX_SIZES for compute capability 9.0 (H100/H200), from
# vllm/distributed/device_communicators/all_reduce_utils.py at 00d618aa.
VLLM_MAX_SIZES_SM90 = {2: 64 << 20, 4: 32 << 20, 6: 64 << 20, 8: 64 << 20}


def _synchronize(ctx) -> None:
    """vLLM calls torch.accelerator.synchronize(); a machine without an accelerator has
    nothing to wait for (torch's call raises there)."""
    if ctx.is_cuda:
        torch.accelerator.synchronize()


def _pointer_contract(hdl, t: torch.Tensor) -> dict:
    """What torch's backends promise about a handle's pointers, for `t`'s handle."""
    rank, world = hdl.rank, hdl.world_size
    ptrs = list(hdl.buffer_ptrs)
    return {
        "own_plus_offset_is_data_ptr": t.data_ptr() - ptrs[rank] == hdl.offset,
        "offset": hdl.offset,
        "peers_nonzero": all(p != 0 for p in ptrs),
        "pads_nonzero": all(p != 0 for p in hdl.signal_pad_ptrs),
        "distinct": len(set(ptrs)) == world,
    }


# ---------------------------------------------------------------------------- vLLM


def vllm_peer_allocation(ctx):
    """vLLM's allocate_symm_mem_peer (vllm/distributed/device_communicators/symm_mem.py
    at vllm-project/vllm 00859a52088e757514a25dddd0214ccc89898a1c), call for call:
    symm_mem.empty, zero_(), synchronize, rendezvous(t, group_name), barrier(),
    get_buffer(p, shape, dtype, 0) for every peer p; then no pointer may be 0 and the
    own one must be the storage's address, else vLLM raises "Local symmetric-memory
    pointer does not match storage" and gives up on symmetric memory. Then what its
    SymmMemPeerAllocation does with it: multicast_ptr, buffer_size, peer pointers of a
    view (peer_ptrs_for_view), and a read of every peer's data."""
    shape = tuple(ctx.args.get("shape", (64, 128)))
    group = dist.group.WORLD
    storage = symm_mem.empty(shape, dtype=BF16, device=ctx.device)
    storage.zero_()
    _synchronize(ctx)
    handle = symm_mem.rendezvous(storage, group.group_name)
    assert handle is not None, "symmetric-memory rendezvous returned None"
    handle.barrier()
    peer_views = [handle.get_buffer(peer, list(shape), BF16, 0) for peer in range(group.size())]
    peer_ptrs = torch.tensor([v.data_ptr() for v in peer_views], dtype=torch.int64, device=storage.device)
    no_null = not bool((peer_ptrs == 0).any().item())
    own_matches = int(peer_ptrs[group.rank()].item()) == storage.data_ptr()
    try:
        multicast_ptr = int(handle.multicast_ptr or 0)
    except Exception:  # vLLM treats any failure as "no multicast"
        multicast_ptr = 0
    buffer_size = int(getattr(handle, "buffer_size", storage.nbytes))

    # peer_ptrs_for_view: a view's peer addresses are the peers' pointers plus the
    # view's byte offset in the storage.
    view = storage.view(-1)[17:]
    view_offset = view.data_ptr() - storage.data_ptr()
    view_ptrs = peer_ptrs + view_offset
    view_own_matches = int(view_ptrs[group.rank()].item()) == view.data_ptr()

    # Every rank stamps its storage; every rank reads every peer's stamp through the
    # views vLLM keeps.
    storage.fill_(ctx.rank + 1)
    _synchronize(ctx)
    handle.barrier(channel=1)
    seen = [float(v.view(-1)[-1].item()) for v in peer_views]
    handle.barrier(channel=2)
    return {
        "no_null": no_null,
        "own_matches": own_matches,
        "view_own_matches": view_own_matches,
        "multicast_ptr": multicast_ptr,
        "buffer_size": buffer_size,
        "nbytes": storage.nbytes,
        "seen": seen,
        **_pointer_contract(handle, storage),
    }


def vllm_communicator_init(ctx):
    """SymmMemCommunicator.__init__ (same file and commit as vllm_peer_allocation), the
    way it runs on an H200 (capability 9.0): the world size must be in vLLM's table,
    the buffer is symm_mem.empty(max_size // 2) bf16 rendezvoused on the group's name,
    and the communicator disables itself when multicast_ptr == 0, which is the case for
    every backend here because multicast is off (torch's CUDA backend with
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 too). On CPU vLLM stops earlier (its platform is
    not CUDA); the symmetric memory part is replayed with max_size_override."""
    group = dist.group.WORLD
    world = dist.get_world_size(group)
    if ctx.is_cuda:
        torch.accelerator.set_device_index(torch.device(ctx.device))
        capability = "%d.%d" % torch.cuda.get_device_capability(ctx.device)
        if capability != "9.0" or world not in VLLM_MAX_SIZES_SM90:
            return {"disabled": True, "why": f"capability {capability}, world {world} not in vLLM's table"}
    max_size = ctx.args.get("max_size_override") or VLLM_MAX_SIZES_SM90[world]
    buffer = symm_mem.empty(max_size // BF16.itemsize, device=ctx.device, dtype=BF16)
    handle = symm_mem.rendezvous(buffer, group.group_name)
    disabled = handle.multicast_ptr == 0
    return {
        "disabled": disabled,
        "why": "multicast_ptr == 0" if disabled else "",
        "multicast_ptr": int(handle.multicast_ptr),
        "buffer_bytes": buffer.nbytes,
        **_pointer_contract(handle, buffer),
    }


def _small_ints(n: int, rank: int, device) -> torch.Tensor:
    """Values a bf16 sum over up to 8 ranks keeps exactly (integers 0..6)."""
    return ((torch.arange(n, device=device) + 3 * rank) % 7).to(BF16)


def vllm_all_reduce(ctx):
    """SymmMemCommunicator.all_reduce's body (same file and commit), which is what vLLM
    runs once the communicator is enabled: copy the input into the symmetric buffer,
    torch.ops.symm_mem.two_shot_all_reduce_ on it (force_multimem=False: multicast is
    off), copy the result out. 4 Ki and 1 Mi bf16 elements, against the plain sum."""
    group = dist.group.WORLD
    numels = ctx.args.get("numels", [4 << 10, 1 << 20])
    buffer = symm_mem.empty(max(numels), device=ctx.device, dtype=BF16)
    symm_mem.rendezvous(buffer, group.group_name)
    results = {}
    for n in numels:
        inp = _small_ints(n, ctx.rank, ctx.device).view(-1, 64)
        out = torch.empty_like(inp)
        buffer[: inp.numel()].copy_(inp.view(-1))
        torch.ops.symm_mem.two_shot_all_reduce_(buffer[: inp.numel()], "sum", group.group_name)
        out.copy_(buffer[: inp.numel()].view(out.shape))
        want = sum(_small_ints(n, r, ctx.device).float() for r in range(ctx.world)).view(-1, 64)
        results[str(n)] = bool(torch.equal(out.float(), want))
    ctx.sync()
    return results


# -------------------------------------------------------------- torch's async-TP


def _seeded(shape, seed: int, device, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


def async_tp_eager(ctx):
    """torch's async-TP ops as a tensor-parallel model calls them
    (torch/distributed/_symmetric_memory/__init__.py of torch 2.11.0, git 70d99e99):
    fused_all_gather_matmul(A_shard, [B], gather_dim, group) == all_gather(A) @ B and
    fused_matmul_reduce_scatter(A, B, "sum", scatter_dim, group) ==
    reduce_scatter(A @ B), both gathering along dim 0 and along the last dim, through
    the group's symmetric workspace (get_symm_mem_workspace: empty_strided_p2p +
    rendezvous on the backend in use). torch registers them for CUDA only."""
    group = dist.group.WORLD.group_name
    W, dev = ctx.world, ctx.device
    M, K, N = 64, 128, 96
    B = _seeded((K, N), 1000, dev)
    shards = [_seeded((M, K), r, dev) for r in range(W)]
    ops = torch.ops.symm_mem
    checks = {}

    A, (AB,) = ops.fused_all_gather_matmul(shards[ctx.rank], [B], 0, group)
    A_full = torch.cat(shards)
    checks["ag_matmul_A"] = bool(torch.equal(A, A_full))
    checks["ag_matmul"] = bool(torch.allclose(AB, A_full @ B, rtol=1e-4, atol=1e-3))

    cols = [_seeded((M, K // W), 50 + r, dev) for r in range(W)]
    A_last, (AB_last,) = ops.fused_all_gather_matmul(cols[ctx.rank], [B], 1, group)
    checks["ag_matmul_last_dim"] = bool(torch.allclose(AB_last, torch.cat(cols, 1) @ B, rtol=1e-4, atol=1e-3))

    parts = [_seeded((M * W, K), 100 + r, dev) for r in range(W)]
    rs = ops.fused_matmul_reduce_scatter(parts[ctx.rank], B, "sum", 0, group)
    total = sum(p @ B for p in parts)
    checks["matmul_rs"] = bool(torch.allclose(rs, total.chunk(W)[ctx.rank], rtol=1e-4, atol=1e-3))
    ctx.sync()
    return checks


def async_tp_compiled(ctx):
    """torch.compile with inductor's micro-pipeline TP pass (torch 2.11.0, git 70d99e99:
    torch/_inductor/fx_passes/micro_pipeline_tp.py, config._micro_pipeline_tp): an
    all_gather followed by a matmul becomes fused_all_gather_matmul, a matmul followed
    by a reduce_scatter fused_matmul_reduce_scatter; and its one-shot all-reduce lowering
    (comm_lowering.py, config._collective.auto_select): a small all_reduce becomes
    one_shot_all_reduce on a buffer inductor allocates from the symmetric allocator.
    The generated code is checked for the fused ops, the results against plain math."""
    import torch._inductor.config as inductor_config
    import torch.distributed._functional_collectives as funcol
    from torch._inductor.utils import run_and_get_code

    group = dist.group.WORLD
    name = group.group_name
    W, dev = ctx.world, ctx.device
    symm_mem.enable_symm_mem_for_group(name)
    M, K, N = 64, 128, 96
    B = _seeded((K, N), 7, dev)
    shards = [_seeded((M, K), r, dev) for r in range(W)]
    parts = [_seeded((M * W, K), 200 + r, dev) for r in range(W)]

    def ag_mm(a, b):
        return funcol.all_gather_tensor(a, 0, name) @ b

    def mm_rs(a, b):
        return funcol.reduce_scatter_tensor(a @ b, "sum", 0, name)

    def ar(x):
        return funcol.all_reduce(x * 2, "sum", name)

    checks = {}
    torch._dynamo.reset()
    with inductor_config.patch({"_micro_pipeline_tp": True}):
        out, code = run_and_get_code(torch.compile(ag_mm, fullgraph=True), shards[ctx.rank], B)
        checks["ag_mm_fused"] = "fused_all_gather_matmul" in "\n".join(code)
        checks["ag_mm"] = bool(torch.allclose(out, torch.cat(shards) @ B, rtol=1e-4, atol=1e-3))
        out, code = run_and_get_code(torch.compile(mm_rs, fullgraph=True), parts[ctx.rank], B)
        checks["mm_rs_fused"] = "fused_matmul_reduce_scatter" in "\n".join(code)
        want = sum(p @ B for p in parts).chunk(W)[ctx.rank]
        checks["mm_rs"] = bool(torch.allclose(out, want, rtol=1e-4, atol=1e-3))
    x = _small_ints(4096, ctx.rank, dev).float()
    with inductor_config.patch({"_collective.auto_select": True}):
        out, code = run_and_get_code(torch.compile(ar, fullgraph=True), x)
        checks["one_shot_lowered"] = "one_shot_all_reduce" in "\n".join(code)
        want = 2 * sum(_small_ints(4096, r, dev).float() for r in range(W))
        checks["one_shot"] = bool(torch.equal(out, want))
    ctx.sync()
    return checks


# ------------------------------------------------------------------ paged KV cache

KV_SHAPE = (2, 128, 16, 8, 128)  # K/V, blocks, tokens per block, kv heads, head dim


def _block(src: int, dst: int, device) -> torch.Tensor:
    """The K and V of one block that rank `src` writes into rank `dst`'s cache."""
    _, _, tokens, heads, dim = KV_SHAPE
    base = torch.arange(tokens * heads * dim, device=device).view(tokens, heads, dim) % 97
    return torch.stack([base + src, base + 100 + dst]).to(BF16)


def _kv_block_index(src: int) -> int:
    return (37 * src + 5) % KV_SHAPE[1]


def paged_kv_cache(ctx):
    """A paged KV cache born symmetric, as the project's first integration had it: a
    [2, 128 blocks, 16 tokens, 8 kv heads, 128] bf16 cache made in the symmetric
    MemPool (symm_mem.get_mem_pool; torch's MemPool is CUDA's, so on CPU the cache
    comes from symm_mem.empty), rendezvoused once; each rank writes one block (K and
    V) into the next rank's cache through get_remote_tensor, and every rank reads the
    block it received from its own cache, with every other block still zero."""
    dev = ctx.device
    if ctx.is_cuda:
        with torch.cuda.use_mem_pool(symm_mem.get_mem_pool(torch.device(dev))):
            kv = torch.empty(KV_SHAPE, dtype=BF16, device=dev)
    else:
        kv = symm_mem.empty(KV_SHAPE, dtype=BF16, device=dev)
    kv.zero_()
    ctx.sync()
    hdl = symm_mem.rendezvous(kv, dist.group.WORLD)
    hdl.barrier()
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    remote = hdl.get_remote_tensor(nxt, KV_SHAPE, BF16)
    remote[:, _kv_block_index(ctx.rank)] = _block(ctx.rank, nxt, dev)
    ctx.sync()
    hdl.barrier(channel=1)
    got = kv[:, _kv_block_index(prv)]
    received = bool(torch.equal(got, _block(prv, ctx.rank, dev)))
    others = torch.ones(KV_SHAPE[1], dtype=torch.bool, device=dev)
    others[_kv_block_index(prv)] = False
    rest_zero = bool((kv[:, others] == 0).all())
    hdl.barrier(channel=2)
    return {"received": received, "rest_zero": rest_zero, "bytes": kv.nbytes, **_pointer_contract(hdl, kv)}


# -------------------------------------------------------- the pointer contract


def _interior(base: torch.Tensor, offset: int, numel: int) -> torch.Tensor:
    """A CPU tensor whose storage starts `offset` bytes into `base`'s, what a MemPool
    that splits its segments hands out."""
    cells = (ctypes.c_uint8 * numel).from_address(base.data_ptr() + offset)
    return torch.frombuffer(cells, dtype=torch.uint8)


def pointer_contract(ctx):
    """t.data_ptr() - buffer_ptrs[rank] == offset for: symm_mem.empty (under torch's
    implicit MemPool when TORCH_SYMMMEM_IMPLICIT_POOL is not 0, CUDA only), the
    symmetric MemPool (CUDA), and interior pointers of a user MemPool that splits its
    segments (CUDA: torch.cuda.MemPool over the symmetric allocator; CPU: tensors inside
    one allocation); each also reads a peer's data at its own offset through
    get_remote_tensor."""
    group = dist.group.WORLD
    dev = ctx.device
    peer = (ctx.rank + 1) % ctx.world
    cases = {}

    def check(name: str, t: torch.Tensor) -> None:
        t.fill_(ctx.rank + 1)
        ctx.sync()
        hdl = symm_mem.rendezvous(t, group)
        hdl.barrier()
        seen = hdl.get_remote_tensor(peer, tuple(t.shape), t.dtype)
        from_peer = bool((seen == peer + 1).all())
        hdl.barrier(channel=1)
        cases[name] = {**_pointer_contract(hdl, t), "from_peer": from_peer}

    check("empty", symm_mem.empty(4096, dtype=torch.uint8, device=dev))
    if ctx.is_cuda:
        with torch.cuda.use_mem_pool(symm_mem.get_mem_pool(torch.device(dev))):
            check("symmetric_pool", torch.empty(4096, dtype=torch.uint8, device=dev))
        pool = torch.cuda.MemPool(symm_mem.get_mempool_allocator(torch.device(dev)))
        with torch.cuda.use_mem_pool(pool):
            # Small blocks of one pool segment: the later ones start inside it.
            tensors = [torch.empty(4096, dtype=torch.uint8, device=dev) for _ in range(3)]
        for i, t in enumerate(tensors):
            check(f"user_pool_{i}", t)
    else:
        base = symm_mem.empty(1 << 16, dtype=torch.uint8, device=dev)
        for offset in (0, 4096, 12_345):
            check(f"interior_{offset}", _interior(base, offset, 4096))
    ctx.sync()
    return cases


# ------------------------------------------------------------------- one world


def replay(ctx):
    """Run the scenarios named in ctx.args["steps"] in order, in one world (a world's
    start costs more than most replays); each step's result under its name."""
    here = globals()
    return {step: here[step](ctx) for step in ctx.args["steps"]}


# --------------------------------------------------------- handle attributes


def handle_attributes(ctx):
    """Every handle attribute the client programs read, for one `symm_mem.empty` tensor,
    described so that two backends can be compared: pointers as what they mean (own
    entry + offset against the storage, peers non-zero and distinct), sizes and ranks as
    values, and what raises as the exception's type. attribute_table.py prints them."""
    group = dist.group.WORLD
    t = symm_mem.empty(4096, dtype=BF16, device=ctx.device)
    hdl = symm_mem.rendezvous(t, group)
    hdl.barrier()

    def attempt(read):
        try:
            return repr(read())
        except Exception as e:  # noqa: BLE001 - the exception's type is the answer
            return f"raises {type(e).__name__}"

    out = {
        **_pointer_contract(hdl, t),
        "buffer_ptrs_dev_nonzero": bool(hdl.buffer_ptrs_dev),
        "buffer_size": hdl.buffer_size,
        "buffer_size_at_least_tensor": hdl.buffer_size >= t.numel() * t.element_size(),
        "multicast_ptr": hdl.multicast_ptr,
        "signal_pad_size": hdl.signal_pad_size,
        "signal_pad_size_is_get_signal_pad_size": hdl.signal_pad_size == symm_mem.get_signal_pad_size(),
        "rank": hdl.rank,
        "world_size": hdl.world_size,
        "world_within_direct_access": attempt(lambda: hdl.world_within_direct_access()),
    }
    hdl.barrier(channel=1)
    ctx.sync()
    return out
