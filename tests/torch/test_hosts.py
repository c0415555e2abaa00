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


def _victim_named_by_every_survivor(scenario, victim, *, stop=False, namespaces=False):
    """Run `scenario` at 4 ranks on 2 hosts with rank `victim` killed (or stopped) in
    the middle; every survivor's error must name it."""
    results = run_world(
        4,
        f"scenarios_hosts.{scenario}",
        # The victim's local peer waits for it on the pads for the timeout, less than
        # the others stay ("linger") after their own error.
        args={"hosts": TWO_HOSTS, "victim": victim, "linger": 3 if stop else 8, "stop": stop},
        env={"SYMMWIN_TIMEOUT_MS": "2000" if stop else "5000"},
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


@pytest.mark.parametrize("scenario", ["spanning_kill", "spanning_ops_kill"], ids=["barrier", "all_to_all"])
@pytest.mark.parametrize("namespaces", [False, True], ids=["host_id", "namespaces"])
def test_rank_killed_mid_barrier_or_op_is_named_on_both_hosts(scenario, namespaces):
    if namespaces and (reason := namespaces_unavailable()):
        pytest.skip(reason)
    _victim_named_by_every_survivor(scenario, 3, namespaces=namespaces)


def test_rank_stopped_mid_all_to_all_is_named_on_both_hosts():
    """A SIGSTOPped rank is alive but never answers: its local peer waits for it on the
    pads and the other host's ranks wait for both through the process group. Every
    survivor's error names the stopped rank (before, the other host named only the live
    rank that was itself waiting for it). The barrier across hosts is not held to this:
    there a host's other ranks wait on the pads for the rank that talks to the other
    host, and may time out naming it before it times out naming the stopped rank."""
    _victim_named_by_every_survivor("spanning_ops_kill", 3, stop=True)


def _check_gpu(results, hosts):
    for rank, r in enumerate(results):
        assert r["direct"] == [p for p in range(len(hosts)) if hosts[p] == hosts[rank]]
        assert r["wwda"] is False
        assert r["pattern_ok"]
        for op in ("one_shot_all_reduce", "two_shot_all_reduce_", "reduce_scatter_out"):
            assert "another host" in r["errors"][op], r["errors"][op]
        assert "Cannot get buffer across nodes" in r["errors"]["get_buffer"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_spanning_ops_fail_clearly_and_signals_cross_over_gloo():
    # Two "hosts" may share one GPU: gloo between them (NCCL refuses two ranks on one
    # GPU), so CUDA messages are staged through host memory.
    hosts = ["a", "b"]
    results = run_world(
        2, "scenarios_hosts.gpu_spanning", device="cuda", args={"hosts": hosts, "signals": True}, hosts=hosts
    )
    _check_gpu(results, hosts)
    assert all(r["signals"] == "ok" for r in results)


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


# Each scenario checks every rank's output against a Python model of the op, as on one
# host; across hosts the same data must give the same results.
OPS_SCENARIOS = ["ops_a2a_vdev", "ops_a2a_2d", "ops_host_sized", "ops_tiles"]


@pytest.mark.parametrize("scenario", OPS_SCENARIOS)
@pytest.mark.parametrize("hosts", [TWO_HOSTS, FOUR_HOSTS], ids=["4_ranks_2_hosts", "8_ranks_4_hosts"])
def test_ops_across_hosts_match_the_model(scenario, hosts):
    results = run_world(len(hosts), scenario, hosts=hosts, timeout=300)
    assert all(r for r in results)


def test_ops_across_namespaces_match_the_model():
    if reason := namespaces_unavailable():
        pytest.skip(reason)
    results = run_world(4, "ops_host_sized", hosts=TWO_HOSTS, namespaces=True, timeout=180)
    assert all(r for r in results)


def test_one_sided_ops_reach_only_this_hosts_ranks():
    results = run_world(4, "scenarios_hosts.spanning_one_sided", args={"hosts": TWO_HOSTS}, hosts=TWO_HOSTS)
    for rank, r in enumerate(results):
        assert "another host" in r["refused"] and "one-sided" in r["refused"], r["refused"]
        assert re.search(rf"\[{r['remote']}\]", r["refused"]), r["refused"]
        if r["got"] is not None:
            assert r["got"] == r["partner"] + 1, f"rank {rank}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("scenario", OPS_SCENARIOS)
@pytest.mark.parametrize("hosts", [["a", "b"], TWO_HOSTS], ids=["2_ranks_2_hosts", "4_ranks_2_hosts"])
def test_gpu_ops_across_hosts_over_gloo_match_the_model(scenario, hosts):
    # Ranks share one GPU where there are fewer GPUs: gloo between the hosts, CUDA
    # tensors staged through host memory; the ranks of one host map each other.
    results = run_world(len(hosts), scenario, device="cuda", hosts=hosts, timeout=300)
    assert all(r for r in results)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (NCCL refuses two ranks on one GPU)")
@pytest.mark.parametrize("scenario", OPS_SCENARIOS)
def test_gpu_ops_across_hosts_over_nccl_match_the_model(scenario):
    hosts = ["a", "b"]
    results = run_world(2, scenario, device="cuda", args={"pg_backend": "nccl"}, hosts=hosts, timeout=300)
    assert all(r for r in results)
