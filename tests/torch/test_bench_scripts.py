"""The benchmark drivers load and parse their arguments on any machine (their GPU jobs
run only where GPUs are): a broken import fails here, not on the GPU machine. And
kernel_ab.py runs end to end with a stand-in for nvcc and the GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    "script", ["compare.py", "ops.py", "rendezvous.py", "wait_cost.py", "kernel_times.py", "kernel_ab.py"]
)
def test_bench_driver_loads(script):
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


# A stand-in for nvcc: the program it "builds" prints the harness's rows, timed by the
# version written in the kernels it was given (-I), so each column shows whose kernels
# ran. The kernels of version "b" fail their checks when FAKE_B_FAILS is set.
FAKE_NVCC = r'''#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
kernels = args[args.index("-I") + 1]
version = open(os.path.join(kernels, "ops.cu")).read().split("=")[1].strip()
exe = args[args.index("-o") + 1]
us = {"a": "1.00 [0.90-1.10]", "b": "0.50 [0.40-0.60]", "c": "0.25 [0.20-0.30]"}[version]
fail = 'if [ -n "$FAKE_B_FAILS" ]; then echo "CHECKS FAILED"; exit 1; fi' if version == "b" else ""
with open(exe, "w") as f:
    f.write(f"""#!/bin/sh
echo "vdev eager: 3 cases, 0 failures"
{fail}
echo "| empty kernel | {us} | 2.00 [1.90-2.10] |"
echo "| a kernel with no eager figure | {us} | - |"
echo "| run with: $* | {us} | - |"
echo "all checks passed"
""")
os.chmod(exe, 0o755)
'''


def _two_commit_checkout(tmp_path: Path) -> Path:
    """A git checkout holding bench/kernel_ab.py and kernels at two commits (a, then b)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "bench" / "kernels").mkdir(parents=True)
    (repo / "crates" / "symmwin-cuda" / "kernels").mkdir(parents=True)
    (repo / "bench" / "kernel_ab.py").write_text((BENCH / "kernel_ab.py").read_text())
    (repo / "bench" / "fixed_cost.cu").write_text("// the harness\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for version in ("a", "b"):
        (repo / "crates" / "symmwin-cuda" / "kernels" / "ops.cu").write_text(f"VERSION={version}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", version], check=True)
        subprocess.run([*git, "tag", version], check=True)
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1))
    nvcc.chmod(0o755)
    return repo


def _kernel_ab(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    script, nvcc = repo / "bench" / "kernel_ab.py", repo.parent / "nvcc"
    return subprocess.run(
        [sys.executable, str(script), "--nvcc", str(nvcc), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_kernel_ab_puts_each_commits_kernels_in_its_own_column(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    done = _kernel_ab(repo, "a", "b", "--rounds", "2", "--", "--only", "kernel")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # What follows -- reaches the harness in every run (a row of the graph table and
    # one of the eager table, each with a figure from all four runs).
    assert out.count("| run with: --only kernel | 1.00 [0.90-1.10] | 0.50 [0.40-0.60] | 1.00") == 1
    assert out.count("| run with: --only kernel | - | - | - | - |") == 1
    # Built once per side, run A B A B.
    assert sum(l.startswith("$ ") for l in out.splitlines()) == 2
    assert [l.split(":")[0] for l in out.splitlines() if l.startswith("run ")] == ["run A", "run B"] * 2
    assert "| row | A run 1 | B run 1 | A run 2 | B run 2 |" in out
    graph = out.split("Graph replay")[1].split("Eager")[0]
    row = "| empty kernel | 1.00 [0.90-1.10] | 0.50 [0.40-0.60] | 1.00 [0.90-1.10] | 0.50 [0.40-0.60] |"
    assert row in graph
    eager = out.split("Eager")[1]
    assert "| a kernel with no eager figure | - | - | - | - |" in eager
    assert "A: vdev eager: 3 cases, 0 failures; all checks passed (exit 0)" in out


def test_kernel_ab_runs_three_sides_in_turn(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    third = tmp_path / "try_c"
    third.mkdir()
    (third / "ops.cu").write_text("VERSION=c\n")
    done = _kernel_ab(repo, "a", "b", str(third), "--rounds", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert sum(l.startswith("$ ") for l in out.splitlines()) == 3
    assert [l.split(":")[0] for l in out.splitlines() if l.startswith("run ")] == ["run A", "run B", "run C"] * 2
    assert f"A = a, B = b, C = {third}; harness:" in out
    assert "| row | A run 1 | B run 1 | C run 1 | A run 2 | B run 2 | C run 2 |" in out
    a, b, c = "1.00 [0.90-1.10]", "0.50 [0.40-0.60]", "0.25 [0.20-0.30]"
    assert f"| empty kernel | {a} | {b} | {c} | {a} | {b} | {c} |" in out.split("Eager")[0]


def test_kernel_ab_needs_two_sides(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    done = _kernel_ab(repo, "a")
    assert done.returncode == 2
    assert "give 2 to 26 sides to compare, not 1" in done.stderr


def test_kernel_ab_fails_when_one_sides_checks_fail(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    done = _kernel_ab(repo, "a", "b", "--rounds", "1", FAKE_B_FAILS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "B: vdev eager: 3 cases, 0 failures; CHECKS FAILED (exit 1)" in done.stdout
    assert "its last lines:" in done.stdout


def test_kernel_ab_names_a_commit_it_cannot_read(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    done = _kernel_ab(repo, "a", "no-such-commit")
    assert done.returncode != 0
    assert "cannot read crates/symmwin-cuda/kernels at 'no-such-commit'" in done.stderr


def test_kernel_ab_takes_a_directory_of_kernels_for_a_commit(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    copy = tmp_path / "copy_of_b"
    copy.mkdir()
    (copy / "ops.cu").write_text("VERSION=b\n")
    done = _kernel_ab(repo, "a", str(copy), "--rounds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"-I {copy}" in done.stdout
    assert "| empty kernel | 1.00 [0.90-1.10] | 0.50 [0.40-0.60] |" in done.stdout
    done = _kernel_ab(repo, "a", str(tmp_path))
    assert done.returncode != 0
    assert "is a directory without ops.cu" in done.stderr


def test_kernel_ab_builds_where_nvcc_is_and_runs_the_programs_where_it_is_not(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    built = tmp_path / "built"
    done = _kernel_ab(repo, "a", "b", "--build-into", str(built))
    assert done.returncode == 0, done.stdout + done.stderr
    programs = [built / "fixed_cost_A", built / "fixed_cost_B"]
    assert all(p.is_file() and os.access(p, os.X_OK) for p in programs)
    assert not any(l.startswith("run ") for l in done.stdout.splitlines())  # built, not run
    # On the GPU machine: no nvcc, the programs are the sides.
    (repo.parent / "nvcc").unlink()
    done = _kernel_ab(repo, *map(str, programs), "--rounds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(l.startswith("$ ") for l in done.stdout.splitlines())
    assert [l.split(":")[0] for l in done.stdout.splitlines() if l.startswith("run ")] == ["run A", "run B"]
    assert "| empty kernel | 1.00 [0.90-1.10] | 0.50 [0.40-0.60] |" in done.stdout


def test_kernel_ab_builds_only_from_commits_or_kernels(tmp_path):
    repo = _two_commit_checkout(tmp_path)
    built = tmp_path / "built"
    assert _kernel_ab(repo, "a", "b", "--build-into", str(built)).returncode == 0
    done = _kernel_ab(repo, "a", str(built / "fixed_cost_B"), "--build-into", str(tmp_path / "again"))
    assert done.returncode == 2
    assert "--build-into builds from commits or kernel directories, not from programs" in done.stderr
