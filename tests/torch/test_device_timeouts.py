"""Device-side waits that time out fail loudly (CUDA; one GPU is enough: ranks share
it, in gloo groups, started without torchrun, whose agent would kill the survivors).

A timed-out wait prints one line from the device and traps, so torch's next
synchronize raises; symmwin's next call then raises its own error naming the op,
channel and peers and saying the process must exit. Every test prints each rank's
exit code and first error lines (and appends them to $SYMMWIN_TIMEOUT_REPORT when set)
so a run can be quoted."""

from __future__ import annotations

import os
import re
import signal

import pytest
import torch

from harness import RankOutcome, run_ranks

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (the ranks share one)"
)

OPS = ["barrier", "wait_signal", "put_signal"]
KILL_TIMEOUT_MS = 5000
DEVICE_LINE = re.compile(r"^symmwin: device .*$", re.MULTILINE)


def _device_line(o: RankOutcome) -> str | None:
    match = DEVICE_LINE.search(o.output)
    return match.group(0) if match else None


def _report(title: str, outcomes: list[RankOutcome]) -> None:
    lines = [f"== {title}"]
    for o in outcomes:
        value = (o.result or {}).get("value") or {}
        error = (o.result or {}).get("error")
        lines.append(f"rank {o.rank}: exit {o.returncode}")
        if error:
            lines.append(f"  scenario failed: {error.strip().splitlines()[-1]}")
        for key in ("raised_after_s", "sync_error", "next_call_error", "alloc_error"):
            if key in value:
                lines.append(f"  {key}: {value[key]}")
        if line := _device_line(o):
            lines.append(f"  device line: {line}")
    text = "\n".join(lines)
    print(text)
    if path := os.environ.get("SYMMWIN_TIMEOUT_REPORT"):
        with open(path, "a") as f:
            f.write(text + "\n")


def _assert_loud(o: RankOutcome, op: str, peer: int, limit_s: float) -> None:
    """`o` timed out in `op` waiting for `peer` and said so everywhere it must."""
    assert o.returncode == 0 and o.result and o.result["ok"], o.output[-3000:]
    r = o.result["value"]
    assert r["sync_error"], "torch.cuda.synchronize() must raise after a device timeout"
    assert r["raised_after_s"] < limit_s + 1.0, r["raised_after_s"]
    message = r["next_call_error"] or ""
    assert message.startswith(f"symmwin rank {o.rank} [signal] peer {peer}: device {op} on channel 1 timed out"), message
    assert f"waiting for rank(s) [{peer}]" in message and "must exit" in message, message
    # An allocation must raise too (torch may get there first with its own CUDA error).
    assert r["alloc_error"], "allocating after a device timeout must raise"
    line = _device_line(o) or ""
    assert line.startswith(f"symmwin: device {op} timed out on rank {o.rank}, channel 1: waited"), o.output[-3000:]
    assert f"for rank(s) {peer};" in line, line


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("op", OPS)
def test_killed_peer_fails_every_survivor(op, world):
    outcomes, timed_out = run_ranks(
        world,
        "gpu_timeout_killed_peer",
        device="cuda",
        args={"op": op, "timeout_ms": KILL_TIMEOUT_MS},
        timeout=120,
    )
    _report(f"{op}, world {world}, rank {world - 1} SIGKILLed", outcomes)
    assert not timed_out, "a survivor hung"
    victim = world - 1
    assert outcomes[victim].returncode == -signal.SIGKILL
    for o in outcomes[:victim]:
        _assert_loud(o, op, victim, KILL_TIMEOUT_MS / 1000)


@pytest.mark.parametrize("op", OPS)
def test_only_rank_0_calls(op):
    # torch's own negative tests: rank 0 alone, timeout_ms=1000, then synchronize.
    outcomes, timed_out = run_ranks(2, "gpu_timeout_alone", device="cuda", args={"op": op}, timeout=90)
    _report(f"{op}, only rank 0 calls it", outcomes)
    assert not timed_out
    assert outcomes[1].returncode == 0 and outcomes[1].result["ok"], outcomes[1].output[-3000:]
    _assert_loud(outcomes[0], op, 1, 1.0)


def test_timeout_in_graph_replay_surfaces_at_synchronize():
    outcomes, timed_out = run_ranks(2, "gpu_timeout_in_replay", device="cuda", timeout=90)
    _report("barrier in a CUDA graph, replayed by rank 0 alone", outcomes)
    assert not timed_out
    assert outcomes[1].returncode == 0 and outcomes[1].result["ok"], outcomes[1].output[-3000:]
    _assert_loud(outcomes[0], "barrier", 1, 1.0)


# 10,000 by default; the ranks share a GPU, so each round costs a time slice.
SOAK_ROUNDS = int(os.environ.get("SYMMWIN_SOAK_ROUNDS", "10000"))


def test_signals_in_time_never_raise():
    outcomes, timed_out = run_ranks(
        2, "gpu_signal_soak", device="cuda", args={"rounds": SOAK_ROUNDS}, timeout=540
    )
    _report(f"{SOAK_ROUNDS} barriers + put/wait pairs, eager and graph replay", outcomes)
    for o in outcomes:
        print(f"rank {o.rank}: {(o.result or {}).get('value')}")
    assert not timed_out
    for o in outcomes:
        assert o.returncode == 0 and o.result and o.result["ok"], o.output[-3000:]
        r = o.result["value"]
        assert r["eager_rounds"] == SOAK_ROUNDS and r["graph_rounds"] >= 100
        assert r["pad_zero_at_rest"]
        assert _device_line(o) is None, _device_line(o)
