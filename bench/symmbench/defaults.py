"""Units, backends and paths that every part of the benchmark shares."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
BACKENDS = ["SYMMWIN", "CUDA", "NCCL", "NVSHMEM"]
KIB = 1024
MIB = 1024 * KIB


def size_label(b: int) -> str:
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"
