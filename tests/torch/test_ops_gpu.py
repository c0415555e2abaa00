"""torch.ops.symmwin.* on CUDA windows: graph capture with changing splits, both
engines, long runs next to barrier() and one_shot_all_reduce, device-side overflow,
sent splits the input cannot honour, and identical results to torch's NVSHMEM ops.
World 4 and 8 share the GPUs (gloo groups; NCCL refuses two ranks on one GPU); the
NVSHMEM comparison needs one GPU per rank. Scenarios: ops_gpu_scenarios.py."""

from __future__ import annotations

import pytest
import torch

from harness import WorldFailed, run_world

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

WORLDS = [2, 4, 8]


def _run(world, name, **kw):
    return run_world(world, f"ops_gpu_scenarios:{name}", device="cuda", **kw)


@pytest.mark.parametrize("world", [1] + WORLDS)
def test_graph_replay_with_changing_splits(world):
    replays = 20 if world <= 2 else 6
    assert _run(world, "graph_replay", args={"replays": replays}, timeout=400) == [replays] * world


@pytest.mark.parametrize("world", [1] + WORLDS)
def test_graph_replay_at_the_largest_expert_count(world):
    # The kernels hold 512 experts per rank and 2048 splits in all.
    experts = min(512, 2048 // world)
    args = {"replays": 3, "experts": experts}
    assert _run(world, "graph_replay", args=args, timeout=400) == [3] * world


@pytest.mark.parametrize("world", [2, 4])
def test_both_engines_of_the_host_sized_ops(world):
    sizes = [4096, 1 << 20, 17 << 20] if world == 2 else [4096, 1 << 20]
    results = _run(world, "engines", args={"sizes": sizes}, timeout=400)
    assert results == [3 * len(sizes) + 2] * world


@pytest.mark.parametrize("world", WORLDS)
def test_a_thousand_calls_next_to_barrier_and_one_shot_all_reduce(world):
    calls = 1000 if world == 2 else 300
    results = _run(world, "soak", args={"calls": calls}, timeout=580)
    assert results == [calls // 10] * world


def test_received_splits_larger_than_out_trap_and_name_the_peer():
    world = 2
    results = _run(world, "overflow", timeout=120, env={"SYMMWIN_TIMEOUT_MS": "3000"})
    for rank, r in enumerate(results):
        # The trap makes the next synchronisation raise, as torch's backends do.
        assert r["sync"] != "no error", (rank, r)
    # Rank 0 says which peer sent how many rows into how little room.
    assert "rows from rank" in results[0]["next"] and "room for 2 rows" in results[0]["next"], results[0]
    # Rank 1 waited for rank 0, which never answered: rank 0 is named, as exited when
    # it left (after its trap) inside rank 1's timeout, else as late.
    waited = results[1]["next"]
    exited = "rank 0 (pid " in waited and "exited while rank 1 waited for it" in waited
    assert exited or ("timed out" in waited and "0" in waited), results[1]


@pytest.mark.parametrize(
    "case, named",
    [
        ("large", "a split of 17 rows for rank 1"),
        ("negative", "a split of -1 rows for rank 0"),
        ("sum", "a split of 10 rows for rank 1"),
    ],
)
def test_sent_splits_outside_the_input_trap_and_name_the_split(case, named):
    results = _run(2, "bad_split", args={"case": case}, timeout=120, env={"SYMMWIN_TIMEOUT_MS": "3000"})
    assert results[0]["sync"] != "no error", results[0]
    # Rank 0's device checked its own table before its peer could read a row.
    said = results[0]["next"]
    assert named in said and "reaches past the input (16 rows)" in said, said
    assert results[1]["sync"] != "no error", results[1]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NVSHMEM needs one GPU per rank (2 GPUs)")
def test_same_inputs_give_the_same_outputs_as_nvshmem():
    import torch.distributed._symmetric_memory as symm_mem

    world = 2
    # symmwin's side runs (and must succeed) whether or not the reference can.
    ours = _run(world, "nvshmem_same_inputs", timeout=300)
    assert len(ours) == world and all(r.keys() == ours[0].keys() for r in ours), ours
    if not symm_mem.is_nvshmem_available():
        pytest.skip("symmwin's side ran; torch's NVSHMEM backend is not available here")
    try:
        ref = _run(world, "nvshmem_reference", args={"torch_backend": True}, timeout=300)
    except WorldFailed as e:
        pytest.skip(f"symmwin's side ran; torch's NVSHMEM backend does not run here:\n{e}")
    assert ours == ref
