"""The benchmark drivers load and parse their arguments on any machine (their GPU jobs
run only where GPUs are): a broken import fails here, not on the GPU machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("script", ["compare.py", "ops.py", "rendezvous.py", "wait_cost.py", "kernel_times.py"])
def test_bench_driver_loads(script):
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
