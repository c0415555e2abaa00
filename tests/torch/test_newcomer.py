"""What a new user meets first: timeouts that follow the process group and can be
caught, settings checked at import, SYMMWIN_LOG, the package's own metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from harness import run_world, worker_env


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=worker_env(env), capture_output=True, text=True, timeout=120
    )


def test_rendezvous_follows_the_process_group_timeout_and_raises_symmwin_timeout_error():
    results = run_world(
        2,
        "group_timeout",
        args={"group_timeout_s": 3},
        env={"SYMMWIN_TIMEOUT_MS": None},
        timeout=60,
    )
    caught = results[0]
    assert 2.5 < caught["seconds"] < 15, caught
    assert caught["is_dist_backend_error"] and caught["is_runtime_error"], caught
    assert "timed out after 3.0 s waiting for rank(s) [1]" in caught["message"], caught


def test_symmwin_timeout_ms_wins_over_the_process_group_timeout():
    results = run_world(
        2,
        "group_timeout",
        args={"group_timeout_s": 30},
        env={"SYMMWIN_TIMEOUT_MS": "1500"},
        timeout=60,
    )
    assert results[0]["seconds"] < 10, results[0]
    assert "timed out after 1.5 s" in results[0]["message"], results[0]


def test_a_bad_setting_fails_the_import_with_one_prefix():
    proc = _python("import symmwin", {"SYMMWIN_TIMEOUT_MS": "soon"})
    assert proc.returncode != 0
    line = [l for l in proc.stderr.splitlines() if "SYMMWIN_TIMEOUT_MS" in l][-1]
    assert 'symmwin [argument]: invalid argument: SYMMWIN_TIMEOUT_MS="soon" is not a number' in line, line
    assert line.count("symmwin [argument]") == 1, line


def test_symmwin_log_reaches_the_library_and_a_bad_filter_is_refused():
    code = """
import torch, symmwin
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
symm_mem.set_backend(symmwin.HOST_BACKEND)
t = symm_mem.empty(16, device="cpu")
assert symm_mem.rendezvous(t, dist.group.WORLD) is not None
dist.destroy_process_group()
"""
    logged = _python(code, {"SYMMWIN_LOG": "debug"})
    assert logged.returncode == 0, logged.stderr
    assert "rank 0 of 1, waits for peers up to" in logged.stderr, logged.stderr
    quiet = _python(code, {"SYMMWIN_LOG": None})
    assert quiet.returncode == 0, quiet.stderr
    assert "waits for peers" not in quiet.stderr, quiet.stderr
    bad = _python("import symmwin", {"SYMMWIN_LOG": "symmwin=loud"})
    assert bad.returncode != 0
    assert 'SYMMWIN_LOG="symmwin=loud" is not a log filter' in bad.stderr, bad.stderr


def test_version_and_handle_type_of_a_torch_device():
    code = """
import torch, symmwin
print(symmwin.__version__)
print(symmwin.handle_type(torch.device("cpu")), symmwin.handle_type("cpu"), symmwin.handle_type(-1))
assert issubclass(symmwin.TimeoutError, torch.distributed.DistBackendError)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    version, types = proc.stdout.splitlines()
    assert version[0].isdigit(), version
    assert types == "posix_fd posix_fd posix_fd", types
    assert torch.__version__  # the suite runs against an installed torch


_WORLD_OF_ONE = """
import torch, symmwin
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
"""

_TROUBLESHOOTING = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def _last_error_line(proc: subprocess.CompletedProcess, needle: str) -> str:
    lines = [l for l in proc.stdout.splitlines() if needle in l]
    assert lines, proc.stdout + proc.stderr
    return lines[-1]


def test_a_cpu_tensor_before_set_backend_is_torchs_error_and_troubleshooting_lists_it():
    code = _WORLD_OF_ONE + """
try:
    symm_mem.empty(16, device="cpu")
except RuntimeError as e:
    print("ERROR", str(e).splitlines()[0])
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    message = _last_error_line(proc, "ERROR")
    assert "SymmetricMemory does not support device type cpu" in message, message
    page = " ".join(_TROUBLESHOOTING.read_text().split())
    assert "`SymmetricMemory does not support device type cpu`" in page
    assert "symm_mem.set_backend(symmwin.HOST_BACKEND)" in page


def test_rendezvous_and_ops_after_destroy_process_group_say_what_happened():
    code = _WORLD_OF_ONE + """
symm_mem.set_backend(symmwin.HOST_BACKEND)
t = symm_mem.empty(16, device="cpu")
assert symm_mem.rendezvous(t, "0") is not None
dist.destroy_process_group()
fresh, out = symm_mem.empty(16, device="cpu"), symm_mem.empty(16, device="cpu")
for name, call in [
    ("rendezvous", lambda: symm_mem.rendezvous(fresh, "0")),
    ("op", lambda: torch.ops.symmwin.all_to_all_into(fresh, out, "0")),
]:
    try:
        call()
    except RuntimeError as e:
        print(name, " ".join(str(e).split()))
    else:
        print(name, "no error")
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    for name in ["rendezvous", "op"]:
        line = _last_error_line(proc, f"{name} ")
        assert "Could not resolve the process group registered under the name 0" in line, line
        assert "was dist.destroy_process_group() called?" in line, line
        assert "dist.init_process_group()" in line, line
    page = " ".join(_TROUBLESHOOTING.read_text().split())
    assert "was dist.destroy_process_group() called?" in page
