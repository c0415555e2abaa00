"""Device-side waits that time out, or whose peer dies, fail loudly (CUDA; one GPU is
enough: ranks share it, in gloo groups, started without torchrun, whose agent would
kill the survivors).

A timed-out wait prints one line from the device and traps, so torch's next
synchronize raises; symmwin's next call then raises its own error naming the op,
channel and peers and saying the process must exit. A wait for a peer whose process
ends does the same within a second of the end, naming the peer and its pid (the host's
peer watcher marks it in memory the waiting kernel reads), instead of waiting out its
limit. Every test prints each rank's
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


def _raise_slack_s(world: int) -> float:
    """How long after its limit a survivor may raise: 1 s with one rank per GPU. Ranks
    sharing a GPU time-slice it, which delays both the start of a waiting kernel (its
    limit counts from there) and the delivery of another context's trap; measured at
    world 4 on one GPU: 5.95-6.08 s for a 5 s limit."""
    ranks_per_gpu = -(-world // max(1, torch.cuda.device_count()))
    return 1.0 if ranks_per_gpu <= 2 else 1.5


def _assert_loud(o: RankOutcome, op: str, peer: int, limit_s: float, slack_s: float = 1.0) -> None:
    """`o` timed out in `op` waiting for `peer` and said so everywhere it must, within
    `slack_s` of `limit_s`."""
    assert o.returncode == 0 and o.result and o.result["ok"], o.output[-3000:]
    r = o.result["value"]
    assert r["sync_error"], "torch.cuda.synchronize() must raise after a device timeout"
    assert r["raised_after_s"] < limit_s + slack_s, r["raised_after_s"]
    message = r["next_call_error"] or ""
    assert message.startswith(f"symmwin rank {o.rank} [signal] peer {peer}: device {op} on channel 1 timed out"), message
    assert f"waiting for rank(s) [{peer}]" in message and "must exit" in message, message
    # symmwin's report is its own timeout class; torch's synchronize error stays torch's.
    assert r.get("next_call_is_symmwin_timeout"), message
    assert not r.get("sync_error_is_symmwin_timeout"), r["sync_error"]
    # An allocation must raise too (torch may get there first with its own CUDA error).
    assert r["alloc_error"], "allocating after a device timeout must raise"
    line = _device_line(o) or ""
    assert line.startswith(f"symmwin: device {op} timed out on rank {o.rank}, channel 1: waited"), o.output[-3000:]
    assert f"for rank(s) {peer};" in line, line


def _assert_named_exit(o: RankOutcome, op: str, peer: int, within_s: float) -> None:
    """`o`'s wait in `op` ended because `peer` died, said so everywhere it must, and
    raised within `within_s` of the wait's start."""
    assert o.returncode == 0 and o.result and o.result["ok"], o.output[-3000:]
    r = o.result["value"]
    assert r["sync_error"], "torch.cuda.synchronize() must raise after the trap"
    assert r["raised_after_s"] < within_s, r["raised_after_s"]
    message = r["next_call_error"] or ""
    head = f"symmwin rank {o.rank} [signal] peer {peer}: device {op}: rank {peer} (pid "
    assert message.startswith(head), message
    assert f"exited while rank {o.rank} waited for it on channel 1" in message, message
    assert "timed out" not in message and "must exit" in message, message
    assert r.get("next_call_is_symmwin_timeout"), message
    assert r["alloc_error"], "allocating after the trap must raise"
    line = _device_line(o) or ""
    assert line.startswith(f"symmwin: device {op} on rank {o.rank}, channel 1: rank {peer} (pid "), o.output[-3000:]
    assert f"exited while rank {o.rank} waited for it" in line, line


# Three survivors sharing one GPU see the mark at the same moment and trap within a few
# milliseconds of each other; on an H200 with driver 580 one of them then never returns
# from torch.cuda.synchronize() (its device line is printed, so its kernel trapped).
# Traps spread over ~100 ms (the timeouts of the same test before the marks) did not
# hang. One rank per GPU has not been tried yet.
_SIMULTANEOUS_TRAPS = pytest.mark.xfail(
    torch.cuda.device_count() < 4,
    reason="3 survivors sharing a GPU trap at once: one synchronize hangs (driver 580, H200)",
    strict=False,
)


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=_SIMULTANEOUS_TRAPS)])
@pytest.mark.parametrize("op", OPS)
def test_killed_peer_fails_every_survivor(op, world):
    outcomes, timed_out = run_ranks(
        world,
        "gpu_timeout_killed_peer",
        device="cuda",
        args={"op": op, "timeout_ms": KILL_TIMEOUT_MS},
        timeout=60,
    )
    _report(f"{op}, world {world}, rank {world - 1} SIGKILLed", outcomes)
    assert not timed_out, "a survivor hung:\n" + "\n".join(
        f"--- rank {o.rank}: exit {o.returncode}\n{o.output[-2500:]}" for o in outcomes
    )
    victim = world - 1
    assert outcomes[victim].returncode == -signal.SIGKILL
    # The victim dies 0.5 s after the survivors start waiting, well inside their limit:
    # each names it within a second of its death, not at the limit.
    for o in outcomes[:victim]:
        _assert_named_exit(o, op, victim, 0.5 + 1.0 + _raise_slack_s(world) / 2)


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
