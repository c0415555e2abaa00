"""Prints what a rendezvous handle reports for every attribute the client programs
read (vLLM, torch's async-TP, SGLang), from SYMMWIN and from torch's own CUDA backend
in one run, side by side: docs/pytorch.md's attribute table comes from this.

    python tests/torch/attribute_table.py [--world 2]

Needs a GPU; the ranks may share one (torch's backend is given
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 for that). Exits non-zero when a rank of
either backend fails or when an attribute that torch's contract fixes differs."""

from __future__ import annotations

import argparse
import sys

import torch

from harness import run_world

# What must be the same on both backends: the pointer contract and the values.
MUST_AGREE = (
    "own_plus_offset_is_data_ptr",
    "peers_nonzero",
    "distinct",
    "buffer_ptrs_dev_nonzero",
    "buffer_size_at_least_tensor",
    "offset",
    "pads_nonzero",
    "signal_pad_size",
    "signal_pad_size_is_get_signal_pad_size",
    "rank",
    "world_size",
)
OVERLAP = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}


def collect(world: int) -> dict[str, list[dict]]:
    scenario = "clients_scenarios.handle_attributes"
    return {
        "SYMMWIN": run_world(world, scenario, device="cuda", timeout=180),
        "torch CUDA": run_world(
            world, scenario, device="cuda", args={"torch_backend": True}, env=OVERLAP, timeout=180
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("attribute_table.py needs a GPU", file=sys.stderr)
        return 2
    results = collect(args.world)
    ours, theirs = results["SYMMWIN"], results["torch CUDA"]
    print(f"world {args.world}, {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("| attribute | rank | SYMMWIN | torch CUDA | agree |")
    print("| --- | --- | --- | --- | --- |")
    differ = []
    for rank in range(args.world):
        for key in ours[rank]:
            a, b = ours[rank][key], theirs[rank].get(key)
            same = a == b
            if key in MUST_AGREE and not same:
                differ.append(f"rank {rank} {key}: {a!r} against {b!r}")
            print(f"| `{key}` | {rank} | {a} | {b} | {'yes' if same else 'no'} |")
    for line in differ:
        print("MUST AGREE:", line, file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
