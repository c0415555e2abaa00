"""The programs that use torch's SymmetricMemory, replayed on symmwin: vLLM's peer
allocation and all-reduce communicator, torch's async-TP (eager and through
torch.compile), a paged KV cache in the symmetric MemPool, and the pointer contract
they rely on, with torch's implicit MemPool on and off. clients_scenarios.py holds the
replays and names the commit of each program they were read from.

On CPU (SYMMWIN_HOST) everything the CPU path allows runs at world 2, 4 and 8;
torch's all-reduce and async-TP kernels are CUDA's only, so those run on the GPU
suite (SYMMWIN, ranks sharing the GPU), where the same replays also run on torch's own
CUDA backend as the reference. Also: SYMMWIN_AUTOLOAD, with programs that never name
symmwin (needs symmwin installed: the entry point comes with the wheel)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
import torch

import harness
from harness import run_world

CPU_STEPS = ["vllm_peer_allocation", "vllm_communicator_init", "paged_kv_cache", "pointer_contract"]
GPU_STEPS = [*CPU_STEPS, "vllm_all_reduce", "async_tp_eager"]
# vLLM's communicator buffer is 32-64 MiB per rank on an H200; a smaller one on CPU.
CPU_ARGS = {"steps": CPU_STEPS, "max_size_override": 1 << 20}
POOL = "TORCH_SYMMMEM_IMPLICIT_POOL"


def _need_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch's all-reduce and async-TP kernels are CUDA's only)")


def _check_replay(results: list[dict], world: int, *, steps: list[str]) -> None:
    for rank, r in enumerate(results):
        where = f"rank {rank} of {world}"
        if "vllm_peer_allocation" in steps:
            a = r["vllm_peer_allocation"]
            assert a["no_null"], f"{where}: vLLM: a null peer pointer"
            assert a["own_matches"], f"{where}: vLLM: local pointer does not match storage: {a}"
            assert a["view_own_matches"], f"{where}: {a}"
            assert a["own_plus_offset_is_data_ptr"] and a["distinct"], f"{where}: {a}"
            assert a["multicast_ptr"] == 0, "multicast is off"
            assert a["buffer_size"] >= a["nbytes"]
            assert a["seen"] == [float(p + 1) for p in range(world)], f"{where}: {a['seen']}"
        if "vllm_communicator_init" in steps:
            c = r["vllm_communicator_init"]
            assert c["disabled"] and c["why"] == "multicast_ptr == 0", f"{where}: {c}"
            assert c["own_plus_offset_is_data_ptr"], f"{where}: {c}"
        if "paged_kv_cache" in steps:
            kv = r["paged_kv_cache"]
            assert kv["bytes"] == 2 * 128 * 16 * 8 * 128 * 2
            assert kv["received"] and kv["rest_zero"], f"{where}: {kv}"
            assert kv["own_plus_offset_is_data_ptr"], f"{where}: {kv}"
        if "pointer_contract" in steps:
            for name, case in r["pointer_contract"].items():
                assert case["own_plus_offset_is_data_ptr"], f"{where}: {name}: {case}"
                assert case["peers_nonzero"] and case["pads_nonzero"] and case["distinct"], f"{where}: {name}: {case}"
                assert case["from_peer"], f"{where}: {name}: {case}"
            offsets = {n: c["offset"] for n, c in r["pointer_contract"].items() if n.startswith("interior_")}
            if offsets:
                assert offsets == {f"interior_{o}": o for o in (0, 4096, 12_345)}, offsets
            users = [c["offset"] for n, c in r["pointer_contract"].items() if n.startswith("user_pool_")]
            if users:
                assert len(set(users)) == len(users) and any(users), f"{where}: no interior pointer: {users}"
        if "vllm_all_reduce" in steps:
            assert all(r["vllm_all_reduce"].values()), f"{where}: {r['vllm_all_reduce']}"
        if "async_tp_eager" in steps:
            assert all(r["async_tp_eager"].values()), f"{where}: {r['async_tp_eager']}"


# ------------------------------------------------------------------------ CPU


@pytest.mark.parametrize("world", [2, 4, 8])
def test_clients_on_host_memory(world):
    results = run_world(world, "clients_scenarios.replay", args=CPU_ARGS, timeout=150)
    _check_replay(results, world, steps=CPU_STEPS)


def test_clients_on_host_memory_without_the_implicit_pool():
    # torch's symm_mem.empty pools CUDA tensors only; on CPU the setting must change
    # nothing either.
    results = run_world(2, "clients_scenarios.replay", args=CPU_ARGS, env={POOL: "0"})
    _check_replay(results, 2, steps=CPU_STEPS)


# ------------------------------------------------------------------------ GPU

# The GPU suite: one GPU, the ranks share it (gloo groups: NCCL refuses two ranks on
# one GPU); torch's CUDA backend needs its own knob to allow that.
TORCH_CUDA_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}


@pytest.mark.parametrize("pool", ["1", "0"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_clients_on_gpu(world, pool):
    _need_gpu()
    args = {"steps": GPU_STEPS}
    results = run_world(world, "clients_scenarios.replay", device="cuda", args=args, env={POOL: pool}, timeout=300)
    _check_replay(results, world, steps=GPU_STEPS)


@pytest.mark.parametrize("world", [2, 4])
def test_clients_on_torchs_cuda_backend_for_reference(world):
    _need_gpu()
    args = {"steps": GPU_STEPS, "torch_backend": True}
    results = run_world(world, "clients_scenarios.replay", device="cuda", args=args, env=TORCH_CUDA_ENV, timeout=300)
    _check_replay(results, world, steps=GPU_STEPS)


@pytest.mark.parametrize("world", [2, 4])
def test_async_tp_through_torch_compile(world):
    _need_gpu()
    results = run_world(world, "clients_scenarios.async_tp_compiled", device="cuda", timeout=600)
    for rank, r in enumerate(results):
        assert all(r.values()), f"rank {rank}: {r}"


def _check_contract_attributes(results, world: int) -> None:
    for rank, r in enumerate(results):
        assert r["own_plus_offset_is_data_ptr"] and r["peers_nonzero"] and r["distinct"], (rank, r)
        assert r["pads_nonzero"] and r["signal_pad_size_is_get_signal_pad_size"], (rank, r)
        assert (r["rank"], r["world_size"], r["offset"]) == (rank, world, 0), (rank, r)
        assert r["buffer_size_at_least_tensor"] and r["multicast_ptr"] == 0, (rank, r)


@pytest.mark.parametrize("world", [2, 3])
def test_handle_attributes_on_host_memory(world):
    _check_contract_attributes(run_world(world, "clients_scenarios.handle_attributes"), world)


def test_handle_attributes_match_torchs_cuda_backend():
    """docs/pytorch.md's attribute table: what torch's contract fixes is the same on
    both backends (attribute_table.py prints the whole table)."""
    _need_gpu()
    import attribute_table

    results = attribute_table.collect(2)
    _check_contract_attributes(results["SYMMWIN"], 2)
    for rank in range(2):
        for key in attribute_table.MUST_AGREE:
            assert results["SYMMWIN"][rank][key] == results["torch CUDA"][rank][key], (rank, key, results)


# ----------------------------------------------------------- SYMMWIN_AUTOLOAD


def _entry_point_installed() -> bool:
    return any(ep.name == "symmwin" for ep in entry_points(group="torch.backends"))


needs_install = pytest.mark.skipif(
    not _entry_point_installed(),
    reason="needs symmwin installed (the torch.backends entry point comes with the wheel: scripts/test_wheel.sh)",
)

# A program that never names symmwin: plain torch.distributed and symmetric memory.
UNMODIFIED = textwrap.dedent(
    """
    import os, sys
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    print("backend", symm_mem.get_backend("cpu"), symm_mem.get_backend("cuda"))
    t = symm_mem.empty(1024, dtype=torch.float32, device="cpu")
    t.fill_(rank + 1)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    hdl.barrier()
    peer = (rank + 1) % world
    seen = hdl.get_buffer(peer, (1024,), torch.float32)
    assert bool((seen == peer + 1).all()), seen[:4]
    assert t.data_ptr() - hdl.buffer_ptrs[rank] == hdl.offset
    hdl.barrier()
    dist.destroy_process_group()
    print("ok")
    """
)


def _run_program(code: str, world: int, extra: dict[str, str | None]) -> list[subprocess.CompletedProcess]:
    port = harness._free_port()
    procs = []
    for rank in range(world):
        env = harness.worker_env(
            {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra}
        )
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


@needs_install
def test_autoload_runs_an_unmodified_program_on_symmwin():
    for p in _run_program(UNMODIFIED, 2, {"SYMMWIN_AUTOLOAD": "1"}):
        assert p.returncode == 0, p.stderr
        assert "backend SYMMWIN_HOST SYMMWIN" in p.stdout and p.stdout.rstrip().endswith("ok"), p.stdout


PROBE = textwrap.dedent(
    """
    import sys, torch
    import torch.distributed._symmetric_memory as symm_mem
    print(symm_mem.get_backend("cpu"), "symmwin" in sys.modules, "_symmwin_autoload" in sys.modules)
    """
)


@needs_install
def test_autoload_unset_changes_nothing_and_imports_nothing_of_symmwin():
    for value in (None, "0", ""):
        (p,) = _run_program(PROBE, 1, {"SYMMWIN_AUTOLOAD": value})
        assert p.returncode == 0, p.stderr
        # The entry point ran (torch loads it) and did nothing.
        assert p.stdout.split() == ["None", "False", "True"], (value, p.stdout, p.stderr)
        assert "SYMMWIN_AUTOLOAD" not in p.stderr


@needs_install
def test_autoload_problems_are_warnings_and_import_torch_still_works():
    (p,) = _run_program(PROBE, 1, {"SYMMWIN_AUTOLOAD": "yes"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "None", p.stdout
    assert 'SYMMWIN_AUTOLOAD="yes" is not a switch' in p.stderr and "RuntimeWarning" in p.stderr, p.stderr
    # A symmwin that cannot start (another setting is bad) is a warning too.
    (p,) = _run_program(PROBE, 1, {"SYMMWIN_AUTOLOAD": "1", "SYMMWIN_TIMEOUT_MS": "-5"})
    assert p.returncode == 0, p.stderr
    assert "SYMMWIN_AUTOLOAD" in p.stderr and 'SYMMWIN_TIMEOUT_MS="-5"' in p.stderr, p.stderr


@needs_install
def test_autoload_with_symmwin_imported_first_selects_once_without_a_warning():
    code = "import symmwin, torch.distributed._symmetric_memory as s; print(s.get_backend('cpu'))"
    (p,) = _run_program(code, 1, {"SYMMWIN_AUTOLOAD": "1"})
    assert p.returncode == 0 and p.stdout.strip() == "SYMMWIN_HOST", (p.stdout, p.stderr)
    assert "Warning" not in p.stderr, p.stderr
