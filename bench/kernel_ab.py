#!/usr/bin/env python3
"""The ops kernels of two or more commits side by side, in one run on one GPU.

    python3 bench/kernel_ab.py main my-branch                 # A = main, B = my-branch
    python3 bench/kernel_ab.py main my-branch --rounds 3 -- --only 'MoE|4 KiB'
    python3 bench/kernel_ab.py main try-1 try-2 --rounds 1    # A, B and C

bench/fixed_cost.cu (from the work tree) is built once per side with nvcc, against
that commit's crates/symmwin-cuda/kernels (or a directory given instead of a commit:
the work tree's own kernels, or a copy of them where there is no git history), and
the programs run in turn, A B A B (A B C A B C with three), so that a clock or a
neighbour that drifts during the run shows in every column. Each run checks the
all_to_all_vdev family against its CPU reference first; a run whose checks fail, or
that stops, is reported and makes the exit status 1. Then every row the harness
timed is printed once per run: the graph figure (us per launch, median [min-max] of
5 repeats), then the eager one.

Where the GPU machine has no CUDA toolkit, build the programs where nvcc is and run
them there: `kernel_ab.py main my-branch --arch sm_90 --build-into DIR` writes
DIR/fixed_cost_A, DIR/fixed_cost_B and stops; on the GPU machine,
`kernel_ab.py DIR/fixed_cost_A DIR/fixed_cost_B` runs them (a side that is a program,
not a commit or a directory, is run as it is).

Only kernels differ between the sides: a change to the harness, or to a kernel
function the harness calls by name, must compile against every side.
Arguments after `--` go to the harness: `--check-only`, or `--only REGEX` to time only
the rows whose names match.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "crates/symmwin-cuda/kernels"
HARNESS = ROOT / "bench" / "fixed_cost.cu"
# "| what | 1.23 [1.20-1.30] | 4.56 [4.50-4.60] |", the eager column may be "-".
ROW = re.compile(r"^\| (?P<what>[^|]+?) \| (?P<graph>[\d.]+ \[[\d.]+-[\d.]+\]) \| (?P<eager>[^|]+?) \|$")


@dataclass
class Run:
    """One run of one side's harness: its rows, in order, and how it ended."""

    side: str
    rows: dict[str, tuple[str, str]] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    status: int = 0
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 0


def is_program(side: str) -> bool:
    """Whether a side names a fixed_cost program built before (--build-into)."""
    path = Path(side)
    return path.is_file() and os.access(path, os.X_OK)


def kernels_of(rev: str, into: Path) -> Path:
    """The kernels of `rev`: a directory holding them (ops.cu and its headers), as it
    is, or a commit's crates/symmwin-cuda/kernels, written under `into`."""
    if Path(rev).is_dir():
        if not (Path(rev) / "ops.cu").is_file():
            sys.exit(f"kernel_ab: {rev} is a directory without ops.cu: not a kernels directory")
        return Path(rev).resolve()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, KERNELS],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        sys.exit(f"kernel_ab: cannot read {KERNELS} at {rev!r}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        # The "data" filter (no links out, no devices) where this Python has it.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    return into / KERNELS


def build(nvcc: str, arch: str, kernels: Path, exe: Path) -> None:
    cmd = [nvcc, "-O3", "-std=c++17", f"-arch={arch}", "-I", str(kernels), "-I", str(ROOT / "bench" / "kernels")]
    cmd += ["-o", str(exe), str(HARNESS)]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"kernel_ab: the build against {kernels} failed:\n{done.stderr[-4000:]}")


def parse(side: str, status: int, out: str) -> Run:
    run = Run(side=side, status=status, tail="\n".join(out.splitlines()[-6:]))
    for line in out.splitlines():
        m = ROW.match(line.strip())
        if m:
            run.rows[m["what"]] = (m["graph"], m["eager"])
        elif "failures" in line or "checks passed" in line or "CHECKS FAILED" in line:
            run.checks.append(line.strip())
    return run


def run_once(side: str, exe: Path, args: list[str], limit: float) -> Run:
    print(f"run {side}: {exe.name} {' '.join(args)}", flush=True)
    try:
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=limit, check=False)
        return parse(side, done.returncode, done.stdout + done.stderr)
    except subprocess.TimeoutExpired as e:
        # Python hands back what was read as bytes here, even in text mode.
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return parse(side, 124, out + f"\nstopped after {limit:.0f} s")


def table(runs: list[Run], sides: int, column: int, title: str) -> str:
    names: list[str] = []
    for run in runs:
        names += [n for n in run.rows if n not in names]
    head = " | ".join(f"{r.side} run {i // sides + 1}" for i, r in enumerate(runs))
    lines = [f"\n{title}\n", f"| row | {head} |", "| --- |" + " --- |" * len(runs)]
    for name in names:
        cells = " | ".join(r.rows[name][column] if name in r.rows else "-" for r in runs)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [options] A B [C ...] [-- HARNESS ARGS]",
        epilog="Arguments after -- go to bench/fixed_cost.cu (--check-only, --only REGEX).",
    )
    ap.add_argument(
        "revs",
        nargs="+",
        metavar="SIDE",
        help="columns A, B, ...: each a commit (or branch), a directory of kernels, or a "
        "fixed_cost program built before (--build-into)",
    )
    ap.add_argument(
        "--build-into",
        metavar="DIR",
        help="build every side's program into DIR (fixed_cost_A, ...) and stop: no GPU needed",
    )
    ap.add_argument("--rounds", type=int, default=2, help="runs of every side (default 2)")
    ap.add_argument("--arch", default="native", help="nvcc -arch (default: the GPU present)")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--limit", type=float, default=300, help="seconds one run may take")
    # Everything after `--` is the harness's: argparse would take it for ours.
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts = ap.parse_args(argv[:split])
    harness_args = argv[split + 1 :]
    if opts.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not 2 <= len(opts.revs) <= 26:
        ap.error(f"give 2 to 26 sides to compare, not {len(opts.revs)}")
    sides = {chr(ord("A") + i): rev for i, rev in enumerate(opts.revs)}
    prebuilt = {side: Path(rev) for side, rev in sides.items() if is_program(rev)}
    if opts.build_into and prebuilt:
        ap.error("--build-into builds from commits or kernel directories, not from programs")
    if len(prebuilt) < len(sides) and not os.path.exists(opts.nvcc):
        ap.error(f"no nvcc at {opts.nvcc}: install the CUDA toolkit or pass --nvcc")

    with tempfile.TemporaryDirectory(prefix="kernel-ab-") as tmp:
        into = Path(opts.build_into) if opts.build_into else Path(tmp)
        into.mkdir(parents=True, exist_ok=True)
        exes = dict(prebuilt)
        for side, rev in sides.items():
            if side not in exes:
                exes[side] = into / f"fixed_cost_{side}"
                build(opts.nvcc, opts.arch, kernels_of(rev, Path(tmp) / side), exes[side])
        if opts.build_into:
            named = ", ".join(f"{exes[side]} = {rev}" for side, rev in sides.items())
            print(f"built {named}")
            return 0
        runs = [
            run_once(side, exes[side], harness_args, opts.limit)
            for _ in range(opts.rounds)
            for side in sides
        ]

    named = ", ".join(f"{side} = {rev}" for side, rev in sides.items())
    print(f"\n{named}; harness: bench/fixed_cost.cu of the work tree")
    for run in runs:
        print(f"{run.side}: {'; '.join(run.checks) or 'no checks printed'} (exit {run.status})")
        if not run.ok:
            print("  its last lines:\n    " + run.tail.replace("\n", "\n    "))
    print(table(runs, len(sides), 0, "Graph replay, us per launch, median [min-max] of 5 repeats"))
    print(table(runs, len(sides), 1, "Eager, us per launch, median [min-max] of 5 repeats"))
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
