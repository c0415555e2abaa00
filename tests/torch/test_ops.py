"""torch.ops.symmwin.* in real multi-process worlds, against a Python model of each
op (and dist.all_to_all_single). CPU tensors on SYMMWIN_HOST run everywhere; the same
scenarios run on SYMMWIN with CUDA tensors where GPUs are present."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import run_world, worker_env

# CPU worlds run everywhere; on GPUs, worlds larger than the GPU count put several
# ranks on one GPU.
WORLDS = [("cpu", w) for w in (1, 2, 3, 4, 8)] + [("cuda", w) for w in (2, 4, 8)]


def _need(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (several ranks share one)")


@pytest.mark.parametrize("device,world", WORLDS)
def test_all_to_all_vdev_matches_the_model(device, world):
    _need(device)
    results = run_world(world, "ops_a2a_vdev", device=device, timeout=240)
    # Every rank checked its output; the patterns really move data somewhere.
    assert all(len(r) == 12 for r in results)
    assert sum(rows for r in results for (_, _, rows) in r) > 0


@pytest.mark.parametrize("device,world", WORLDS)
def test_dispatch_then_combine_restores_the_input(device, world):
    _need(device)
    results = run_world(world, "ops_a2a_2d", device=device, timeout=300)
    assert all(len(r) == 36 for r in results)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_all_to_all_and_broadcast(device, world):
    _need(device)
    assert run_world(world, "ops_host_sized", device=device) == [["bfloat16", "float32", "int64", "uint8"]] * world


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_tile_reduce_to_every_root(device, world):
    _need(device)
    assert all(len(r) == 4 for r in run_world(world, "ops_tiles", device=device))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_one_sided_between_every_pair(device, world):
    _need(device)
    assert run_world(world, "ops_one_sided", device=device, timeout=180) == [world * world] * world


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_thousand_calls_leave_the_pads_at_zero(device):
    _need(device)
    assert run_world(2, "ops_soak", device=device, timeout=300) == [1000, 1000]


# Each bad call of the ops_bad_input scenario, and the words its error must say.
BAD_INPUT_WORDS = {
    "plain": ["not symmwin symmetric memory"],
    "dtype": ["same dtype"],
    "contiguous": ["contiguous"],
    "splits_dtype": ["int64"],
    "splits_shape": ["in_splits"],
    "out_so_shape": ["out_splits_offsets"],
    "align_zero": ["major_align must be positive"],
    "align_negative": ["major_align must be positive"],
    "reduce_op": ["sum"],
    "inner_stride": ["unit inner stride"],
    "int_tile": ["float32"],
    "peer": ["is not a rank of the group"],
    "splits_len": ["in_splits must have {W} entries, the group size, not {W1}"],
    "put_wide": ["peer 4294967297 is not a rank of the group (0 to {W_1}, world size {W})"],
    "get_negative": ["peer -1 is not a rank of the group"],
    "broadcast_wide": ["root 4294967296 is not a rank of the group"],
    "tile_root_wide": ["root 4294967296 is not a rank of the group"],
    "put_signal_wide": ["peer 4294967297 is not a rank of the group"],
    "wait_signal_wide": ["peer 4294967297 is not a rank of the group"],
    "put_with_signal_wide": ["peer 4294967297 is not a rank of the group"],
    "wait_for_signal_wide": ["peer 4294967297 is not a rank of the group"],
    "wait_for_signal_plain": ["is not symmetric memory of group"],
    "a2a_alias": ["all_to_all: out (bytes 0..", "overlaps input", "cannot give the exact result"],
    "a2a_overlap": ["overlaps input"],
    "no_window": ["rendezvous", "one-sided"],
    "engine": ["unknown engine"],
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("world", [1, 2])
def test_bad_input_is_a_clear_error(device, world):
    _need(device)
    results = run_world(world, "ops_bad_input", device=device)
    m = results[0]
    for case, words in BAD_INPUT_WORDS.items():
        for word in words:
            word = word.format(W=world, W1=world + 1, W_1=world - 1)
            assert word in m[case], (case, m[case])
    assert float(m["wait_for_signal_plain_s"]) < 1.0, "refused at once, not waited on"
    if world > 1:
        # 2W + 1 elements: a byte count that splits evenly would slice floats.
        want = f"all_to_all: {2 * world + 1} elements do not split evenly among the {world} ranks"
        assert want in m["a2a_elements"], m["a2a_elements"]
    if device == "cuda":
        return
    room = m["room"]
    # Names the peer, the rows and the room.
    assert "received splits do not fit out" in room and "sends 3 rows, to out rows 0..3" in room, room
    assert "which do not fit an out of 2 rows" in room and "peer" in room, room


# What each rank of ops_disagree passes, odd rank (the last) first: the message names
# its own operands and the other rank's.
DISAGREE = {
    "dtype": ("all_to_all", "4 float64 elements per peer", "8 float32 elements per peer"),
    "same_size": ("all_to_all", "8 int32 elements per peer", "8 float32 elements per peer"),
    "rows": ("all_to_all_vdev", "rows of 16 bytes (4 float32 elements)", "rows of 16 bytes (2 float64 elements)"),
    "broadcast_dtype": ("broadcast", "16 int32 elements from root 0", "16 float32 elements from root 0"),
    "count": ("all_to_all", "4 float32 elements per peer", "8 float32 elements per peer"),
    "root": ("broadcast", None, "16 float32 elements from root 0"),
}


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_that_disagree_on_operands_raise_naming_each_other(world):
    # CPU: every case of DISAGREE fails on every rank, naming what it passed and what
    # the differing ranks passed; the op is named once.
    results = run_world(world, "ops_disagree")
    odd = world - 1
    for rank, caught in enumerate(results):
        others = list(range(odd)) if rank == odd else [odd]
        for case, (op, odd_has, even_has) in DISAGREE.items():
            text = caught[case]
            mine, theirs = (odd_has, even_has) if rank == odd else (even_has, odd_has)
            assert f"ranks disagree on the operands of {op}: rank {rank} (this rank) has" in text, (case, rank, text)
            assert text.count(op) == 1, ("the op is named once", case, text)
            if mine is not None:
                assert f"rank {rank} (this rank) has {mine}" in text, (case, rank, text)
            for other in others:
                want = f"rank {other} has {theirs}" if theirs is not None else f"rank {other} has "
                assert want in text, (case, rank, text)
            assert "1 elements" not in text, text
        assert ("from root 0" in caught["root"].split(";")[0]) != (rank == odd), caught


def test_an_op_whose_peers_never_come_raises_symmwin_timeout_error():
    # CPU only: on CUDA the wait traps (tests/torch/test_ops_gpu.py's overflow case).
    results = run_world(2, "ops_timeouts", timeout=120, env={"SYMMWIN_TIMEOUT_MS": "1500"})
    caught = results[0]
    assert "rank 0" in caught["all_to_all_into"] and "timed out" in caught["all_to_all_into"], caught
    # The sigpad is in no window: the C ABI is told the waiting rank.
    assert "rank 0 " in caught["wait_for_signal"] and "4294967295" not in caught["wait_for_signal"], caught
    assert "peer 1" in caught["wait_for_signal"], caught
    assert results[1] is None


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ops_returning_nothing_compile(device):
    _need(device)
    # Rank 0 of a world of one receives its own two rows, doubled.
    assert run_world(1, "ops_compiled", device=device, timeout=600) == [[0.0, 2.0, 4.0]]


MOE = Path(__file__).resolve().parents[2] / "examples" / "moe" / "moe_layer.py"


def test_moe_example_runs_bare_on_one_rank():
    proc = subprocess.run(
        [sys.executable, str(MOE), "--device", "cpu"], env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "moe rank 0/1 on cpu: ok" in proc.stdout


def test_moe_example_runs_under_torchrun_on_cpu():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += [str(MOE), "--device", "cpu", "--experts-per-rank", "3", "--topk", "3"]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": ok (") == 2, proc.stdout


def test_same_outputs_as_torchs_nvshmem_ops():
    import torch.distributed._symmetric_memory as symm_mem

    if torch.cuda.device_count() < 2 or not symm_mem.is_nvshmem_available():
        pytest.skip("needs 2 GPUs and torch's NVSHMEM (one rank per GPU)")
    theirs = run_world(2, "ops_same_as_torch", device="cuda", args={"impl": "symm_mem", "torch_backend": True})
    ours = run_world(2, "ops_same_as_torch", device="cuda", args={"impl": "symmwin"})
    for rank, (t, o) in enumerate(zip(theirs, ours)):
        for key in t:
            assert o[key] == t[key], f"rank {rank}: {key} differs"
