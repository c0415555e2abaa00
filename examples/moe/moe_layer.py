#!/usr/bin/env python3
"""A mixture-of-experts layer with expert parallelism over symmwin windows.

Each rank holds ``--experts-per-rank`` experts (a two-layer MLP each) and a batch of
tokens. The layer:

1. routes every token to its top-k experts (softmax router, renormalised weights);
2. sorts the (token, expert) pairs by global expert, so the rows bound for rank ``r``
   expert ``e`` are contiguous, and counts them per expert (on the device);
3. **dispatch**: ``torch.ops.symmwin.all_to_all_vdev_2d`` moves the rows to the
   experts' ranks, expert-major, each expert's block aligned to ``--align`` rows;
4. runs each local expert on its block (one matmul pair per expert);
5. **combine**: ``torch.ops.symmwin.all_to_all_vdev_2d_offset`` sends the results
   back, using the dispatch's output splits and offsets as its input splits and
   offsets;
6. un-sorts and sums the k expert outputs of every token by their router weights.

The result is checked against a dense single-process reference computed from the same
seeded weights. Runs on CUDA (backend SYMMWIN) or on CPU (backend SYMMWIN_HOST)::

    torchrun --nproc_per_node=2 examples/moe/moe_layer.py              # CUDA if present
    torchrun --nproc_per_node=4 examples/moe/moe_layer.py --device cpu
    python3 examples/moe/moe_layer.py                                   # one rank, a smoke test
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import torch.nn.functional as F

import symmwin


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=48)
    p.add_argument("--experts-per-rank", type=int, default=2)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--align", type=int, default=8, help="major_align of the dispatch")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def init(device_kind: str) -> tuple[int, int, torch.device]:
    """Join the process group (torchrun's environment, else a world of one)."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device_kind == "auto":
        device_kind = "cuda" if torch.cuda.is_available() else "cpu"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device_kind == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    # gloo everywhere: symmetric memory needs only the group's store, and gloo
    # accepts several ranks per GPU.
    dist.init_process_group("gloo", rank=rank, world_size=world)
    symm_mem.set_backend(symmwin.BACKEND if device_kind == "cuda" else symmwin.HOST_BACKEND)
    return rank, world, device


class Experts:
    """Router and every expert's weights, identical on every rank (seeded)."""

    def __init__(self, n_experts: int, hidden: int, ffn: int, seed: int, device: torch.device):
        g = torch.Generator().manual_seed(seed)
        self.router = torch.randn(hidden, n_experts, generator=g).to(device) / hidden**0.5
        self.w1 = torch.randn(n_experts, hidden, ffn, generator=g).to(device) / hidden**0.5
        self.w2 = torch.randn(n_experts, ffn, hidden, generator=g).to(device) / ffn**0.5

    def expert(self, g: int, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ self.w1[g]) @ self.w2[g]

    def route(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        weights, experts = torch.topk(torch.softmax(x @ self.router, dim=-1), k, dim=-1)
        return weights / weights.sum(-1, keepdim=True), experts


def dense_reference(model: Experts, x: torch.Tensor, k: int) -> torch.Tensor:
    """The layer on one process: every token through its k experts directly."""
    weights, experts = model.route(x, k)
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            y[t] += weights[t, j] * model.expert(int(experts[t, j]), x[t : t + 1])[0]
    return y


class MoELayer:
    """Expert-parallel forward over symmetric buffers allocated once."""

    def __init__(self, model: Experts, args, rank: int, world: int, device: torch.device):
        self.model, self.rank, self.world = model, rank, world
        self.k, self.E, self.align = args.topk, args.experts_per_rank, args.align
        self.group = dist.group.WORLD.group_name
        pairs = args.tokens * args.topk
        # Worst case: every pair of every rank lands on one local expert, plus one
        # aligned block of padding per expert. The same sizes on every rank.
        out_rows = world * pairs + self.E * self.align
        sym = lambda *shape, dtype=torch.float32: symm_mem.empty(shape, dtype=dtype, device=device)  # noqa: E731
        self.send = sym(pairs, args.hidden)
        self.recv = sym(out_rows, args.hidden)
        self.expert_out = sym(out_rows, args.hidden)
        self.back = sym(pairs, args.hidden)
        n = world * self.E
        self.in_splits = sym(n, dtype=torch.int64)
        self.out_splits_offsets = sym(2, n, dtype=torch.int64)
        self.back_splits_offsets = sym(2, n, dtype=torch.int64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.model.route(x, self.k)
        flat = experts.flatten()
        order = torch.argsort(flat, stable=True)  # rows grouped by global expert
        pairs = flat.numel()
        self.send[:pairs].copy_(x.repeat_interleave(self.k, dim=0)[order])
        self.in_splits.copy_(torch.bincount(flat, minlength=self.world * self.E))

        torch.ops.symmwin.all_to_all_vdev_2d(
            self.send, self.recv, self.in_splits, self.out_splits_offsets, self.group, self.align
        )
        self.run_experts()
        torch.ops.symmwin.all_to_all_vdev_2d_offset(
            self.expert_out, self.back, self.out_splits_offsets, self.back_splits_offsets, self.group
        )

        y_pairs = torch.empty_like(self.back[:pairs])
        y_pairs[order] = self.back[:pairs]
        return (y_pairs.view(-1, self.k, x.shape[1]) * weights.unsqueeze(-1)).sum(1)

    def run_experts(self) -> None:
        """Each local expert on its block; blocks are contiguous (expert-major)."""
        W = self.world
        splits = self.out_splits_offsets[0].tolist()
        offsets = self.out_splits_offsets[1].tolist()
        for e in range(self.E):
            start, rows = offsets[e * W], sum(splits[e * W : (e + 1) * W])
            if rows:
                block = self.recv[start : start + rows]
                self.expert_out[start : start + rows] = self.model.expert(self.rank * self.E + e, block)


def main() -> None:
    args = parse_args()
    rank, world, device = init(args.device)
    model = Experts(world * args.experts_per_rank, args.hidden, args.ffn, args.seed, device)
    layer = MoELayer(model, args, rank, world, device)
    g = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)
    x = torch.randn(args.tokens, args.hidden, generator=g).to(device)

    for step in range(3):  # buffers are reused; every step must agree with the reference
        y = layer.forward(x + step)
        want = dense_reference(model, x + step, args.topk)
        err = (y - want).abs().max().item()
        assert torch.allclose(y, want, rtol=1e-4, atol=1e-4), f"rank {rank} step {step}: max |err| {err}"
    received = int(layer.out_splits_offsets[0].sum())
    print(
        f"moe rank {rank}/{world} on {device}: ok ({args.tokens} tokens, top-{args.topk} of "
        f"{world * args.experts_per_rank} experts, received {received} rows, max |err| {err:.2e})"
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
