"""Hostile use through torch, on CPU tensors (SYMMWIN_HOST): process groups destroyed
and made again on the same port, socket files after a clean job, an ordinary tensor
on one rank, a stopped store host. Each was a defect; each test failed before its fix.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from harness import run_world


@pytest.mark.parametrize("second_world", [3, 2])
def test_destroy_and_reinit_on_the_same_port(second_world, tmp_path):
    args = {"second_world": second_world, "store_closed": str(tmp_path / "store_closed")}
    results = run_world(3, "reinit_on_the_same_port", args=args, timeout=60)
    assert results[0]["closed"], "the destroyed group's TCPStore port must be closed"
    for rank, r in enumerate(results):
        assert r["first"] == 10 + (rank + 1) % 3
        if rank < second_world:
            assert r["second"] == 20 + (rank + 1) % second_world


def test_a_clean_job_leaves_no_socket_files():
    with tempfile.TemporaryDirectory(prefix="symmwin-sockets-") as tmp:
        sockets = os.path.join(tmp, "sock")
        results = run_world(2, "clean_job", env={"SYMMWIN_SOCKET_DIR": sockets})
        assert results == [2.0, 1.0]
        assert os.listdir(sockets) == []


def test_an_ordinary_tensor_on_one_rank_is_named_on_every_rank():
    results = run_world(2, "foreign_tensor_on_one_rank")
    for r in results:
        assert r["error"] is not None, "the mix must be an error, not a mis-wired window"
        assert "foreign_calls: 0 on rank(s) [0]; 1 on rank(s) [1]" in r["error"], r["error"]
        assert r["everyone_none"]


def _store_host_failure(scenario, **run_args):
    """Rank 1's error once `scenario` takes the TCPStore's host (rank 0) away: the store
    is named, within the 3 s timeout."""
    r = run_world(2, scenario, env={"SYMMWIN_TIMEOUT_MS": "3000"}, timeout=60, **run_args)[1]
    assert r["error"] is not None
    assert "TCPStore at 127.0.0.1:" in r["error"], r["error"]
    assert r["waited"] < 3.5, r["waited"]
    return r["error"]


def test_a_stopped_store_host_is_named_within_the_timeout():
    error = _store_host_failure("store_host_stopped")
    assert "store is unreachable" in error, error


def test_a_killed_store_host_is_named_as_dead():
    error = _store_host_failure("store_host_killed", killed=(0,))
    assert "has died or exited" in error, error


def test_a_call_one_rank_gave_up_puts_the_group_out_of_step_on_every_rank():
    results = run_world(2, "out_of_step_after_a_lone_rendezvous", env={"SYMMWIN_TIMEOUT_MS": "1000"}, timeout=60)
    assert results[1]["alone"] is not None and "timed out" in results[1]["alone"], results[1]
    for rank, r in enumerate(results):
        for call in ("p", "q"):
            assert r[call] is not None, f"rank {rank}'s {call} returned a window after rank 1 gave a call up"
            assert "out of step since rendezvous" in r[call] and "on rank 1" in r[call], r[call]
            assert "destroy_process_group" in r[call], r[call]
        assert r["q_waited"] < 0.5, "a call after the group went out of step fails at once"


def test_memory_offered_in_an_abandoned_rendezvous_is_not_handed_out_again():
    results = run_world(2, "abandoned_window_is_not_handed_out", env={"SYMMWIN_TIMEOUT_MS": "1000"}, timeout=60)
    assert results[0]["lone"] is not None, results[0]
    assert results[1]["late"] is not None and "out of step" in results[1]["late"], results[1]
    assert results[0]["nonzero"] == 0, "rank 0's fresh tensor holds what rank 1 wrote"
