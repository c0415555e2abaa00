"""Groups that span hosts, on SYMMWIN_HOST with CPU tensors and gloo: hosts made by
SYMMWIN_HOST_ID, and hosts made by separate mount (and UTS) namespaces, where symmwin
must detect by itself that file descriptors cannot pass."""

from __future__ import annotations

import re

import pytest
import torch

from harness import run_world
from hosts import namespaces_unavailable

TWO_HOSTS = ["a", "a", "b", "b"]
FOUR_HOSTS = ["a", "a", "b", "b", "c", "c", "d", "d"]


def _check_spanning(results, hosts):
    for rank, r in enumerate(results):
        local = [p for p in range(len(hosts)) if hosts[p] == hosts[rank]]
        assert r["direct"] == local, f"rank {rank}"
        assert r["wwda"] is False
        assert r["pattern_ok"], "buffer/pad pointers: base + r*stride for local ranks, 0 for the others"
        assert "Cannot get buffer across nodes" in r["errors"]["get_buffer"]
        for table in ("buffer_ptrs_dev", "signal_pad_ptrs_dev"):
            message = r["errors"][table]
            assert "another host" in message and "world_within_direct_access" in message, message
        assert r["written"] == {str(p): 100.0 + p for p in local}
        assert r["allocations_left"] == 0


@pytest.mark.parametrize("hosts", [TWO_HOSTS, FOUR_HOSTS], ids=["4_ranks_2_hosts", "8_ranks_4_hosts"])
def test_spanning_by_host_id(hosts):
    results = run_world(len(hosts), "scenarios_hosts.spanning", args={"hosts": hosts}, hosts=hosts, timeout=180)
    _check_spanning(results, hosts)


def test_spanning_detected_across_namespaces():
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    results = run_world(
        4, "scenarios_hosts.spanning", args={"hosts": TWO_HOSTS}, hosts=TWO_HOSTS, namespaces=True, timeout=180
    )
    _check_spanning(results, TWO_HOSTS)


def test_remote_wait_times_out_naming_the_peer():
    results = run_world(4, "scenarios_hosts.spanning_remote_timeout", args={"hosts": TWO_HOSTS}, hosts=TWO_HOSTS)
    for r in results:
        assert re.search(rf"\b{r['peer']}\b", r["message"]), r["message"]


@pytest.mark.parametrize("namespaces", [False, True], ids=["host_id", "namespaces"])
def test_rank_killed_mid_barrier_is_named_on_both_hosts(namespaces):
    if namespaces and (reason := namespaces_unavailable()):
        pytest.skip(reason)
    victim = 3
    results = run_world(
        4,
        "scenarios_hosts.spanning_kill",
        # Longer than the barrier timeout (5 s) of the victim's local peer.
        args={"hosts": TWO_HOSTS, "victim": victim, "linger": 8},
        hosts=TWO_HOSTS,
        namespaces=namespaces,
        may_die=(victim,),
        timeout=120,
    )
    for rank, r in enumerate(results):
        if rank == victim:
            continue
        assert r is not None, f"rank {rank} gave no result"
        assert re.search(rf"\b{victim}\b", r["message"]), f"rank {rank}: {r['message']}"


def _check_gpu(results, hosts):
    for rank, r in enumerate(results):
        assert r["direct"] == [p for p in range(len(hosts)) if hosts[p] == hosts[rank]]
        assert r["wwda"] is False
        assert r["pattern_ok"]
        for op in ("one_shot_all_reduce", "two_shot_all_reduce_", "reduce_scatter_out"):
            assert "another host" in r["errors"][op], r["errors"][op]
        assert "Cannot get buffer across nodes" in r["errors"]["get_buffer"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_spanning_ops_fail_clearly():
    # Two "hosts" may share one GPU here: gloo between them, so no signals across hosts.
    hosts = ["a", "b"]
    results = run_world(2, "scenarios_hosts.gpu_spanning", device="cuda", args={"hosts": hosts}, hosts=hosts)
    _check_gpu(results, hosts)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (NCCL refuses two ranks on one GPU)")
def test_gpu_spanning_signals_over_nccl():
    hosts = ["a", "b"]
    results = run_world(
        2,
        "scenarios_hosts.gpu_spanning",
        device="cuda",
        args={"hosts": hosts, "signals": True, "pg_backend": "nccl"},
        hosts=hosts,
        timeout=180,
    )
    _check_gpu(results, hosts)
    assert all(r["signals"] == "ok" for r in results)
