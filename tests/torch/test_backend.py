"""The torch backend end to end, in real multi-process worlds.

Every scenario runs on SYMMWIN_HOST with CPU tensors (any Linux box) and, with a
GPU, on SYMMWIN with CUDA tensors (ranks share GPUs round-robin)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from harness import run_world, worker_env

DEVICES = ["cpu", "cuda"]


def _need(device: str) -> None:
    # Worlds larger than the GPU count put several ranks on one GPU (gloo groups).
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _device_of(device: str, rank: int) -> str:
    return "cpu" if device == "cpu" else f"cuda:{rank % torch.cuda.device_count()}"


def _mentions_timeout_and_peer(message: str, peer: int) -> bool:
    return "timed out" in message.lower() and re.search(rf"\b{peer}\b", message) is not None


def test_import_registers_but_activates_nothing():
    code = """
import torch.distributed._symmetric_memory as symm_mem
import symmwin
assert symm_mem.get_backend("cpu") is None, symm_mem.get_backend("cpu")
symm_mem.set_backend(symmwin.HOST_BACKEND)
symm_mem.set_backend(symmwin.BACKEND)
assert symm_mem.get_backend("cpu") == "SYMMWIN_HOST"
assert symm_mem.get_backend("cuda") == "SYMMWIN"
assert symmwin.handle_type(-1) == "posix_fd"
assert isinstance(symmwin.probe(), dict)
"""
    proc = subprocess.run([sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("device", DEVICES)
def test_basic(device):
    _need(device)
    results = run_world(2, "basic", device=device)
    for rank, r in enumerate(results):
        assert r["zero_filled"], "new allocations must be zero-filled"
        assert r["seen"] == [[peer + 1.0] * 4 for peer in range(2)]
        assert r["written"] == [100.0, 101.0]
        assert (r["rank"], r["world_size"]) == (rank, 2)
        assert r["device"] == _device_of(device, rank)
        assert r["buffer_size"] >= 256 * 4
        assert r["flat"], "a peer's buffer_ptrs[r] must be base + r * stride"
        assert r["own_is_allocation"], "buffer_ptrs[rank] + offset must be the tensor's address"
        assert r["own_slot_is_an_alias"]
        assert r["pad_zero_at_rest"]
        assert r["rank_to_global"] == [0, 1]
        # torch 2.11 hands a backend's null handle back as None.
        assert r["plain_tensor"] == "None"


@pytest.mark.parametrize("device", DEVICES)
def test_signals_and_timeout(device):
    _need(device)
    results = run_world(2, "signals", device=device)
    # Device-side timeouts trap: test_device_timeouts.py covers them.
    for r in results if device == "cpu" else []:
        # Its own timeout, or (a peer's timing out first) the poison that one left.
        message = r["timeout_message"]
        assert _mentions_timeout_and_peer(message, r["peer"]) or "this window is poisoned" in message, message
        assert "this window is poisoned: wait_signal on channel 7 timed out" in r["refused"], r["refused"]


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_is_an_error(device):
    _need(device)
    results = run_world(2, "bad_input", device=device)
    for r in results:
        errors = r["errors"]
        # Ranks are checked once, in the core, whatever the call.
        for call in ("put_rank", "wait_rank"):
            assert "is not a rank of the group (0 to 1, world size 2)" in errors[call], errors[call]
        assert errors["put_channel"] and errors["barrier_channel"]
        assert errors["get_buffer_rank"] and errors["get_buffer_size"]
        assert "size" in errors["size_mismatch"].lower(), errors["size_mismatch"]
        assert r["after"] == [0.0, 1.0]


@pytest.mark.parametrize("device", DEVICES)
def test_subgroups(device):
    _need(device)
    results = run_world(4, "subgroups", device=device)
    for rank, r in enumerate(results):
        members = [0, 2] if rank % 2 == 0 else [1, 3]
        assert r["world"] == [rank, 4, [0, 1, 2, 3]]
        assert r["sub"] == [rank // 2, 2, members]
        assert r["workspace"] == [rank // 2, 2, members]
        assert r["from_partner"] == float(members[1 - rank // 2])
        assert r["from_world"] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_persistent_alloc_id(device):
    _need(device)
    results = run_world(2, "persistent", device=device)
    for rank, r in enumerate(results):
        assert r["same_address"]
        assert "still active" in r["in_use_error"]
        assert r["world_size"] == 2
        assert r["peer_value"] == float((rank + 1) % 2 + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_teardown_leaves_nothing(device):
    _need(device)
    results = run_world(2, "teardown", device=device)
    for r in results:
        assert r["live"] == 6
        assert r["after_free"] == 0
        assert r["kept"] == r["expected_kept"]
        assert r["final"] == 0


# Runs of the exit checks; SYMMWIN_EXIT_RUNS=20 gives the full 20-run check (each run
# starts `world` fresh interpreters, about 4 s a pair on a 2-core machine, so the
# defaults keep the suite short: 6 on CPU, a few per world on a GPU).
EXIT_RUNS = int(os.environ.get("SYMMWIN_EXIT_RUNS", "0"))


def test_interpreter_exit_with_live_handles():
    # Teardown order at exit is torch's, not ours; it must be clean every time.
    for _ in range(EXIT_RUNS or 6):
        assert run_world(2, "exit_with_live_handles", timeout=60) == [True, True]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("world,runs", [(2, 3), (4, 2), (8, 1)])
def test_interpreter_exit_with_live_handles_cuda(world, runs):
    # Worlds above the GPU count share GPUs: teardown with several ranks per GPU.
    for _ in range(EXIT_RUNS or runs):
        assert run_world(world, "exit_with_live_handles", device="cuda", timeout=180) == [True] * world
