"""Run a scenario of scenarios.py in `world` fresh processes and collect the results.

Each rank is a separate interpreter (subprocess, not fork) so that every test starts
from torch's pristine backend registry: `set_backend` only works before first use.
"""

from __future__ import annotations

import json
import signal
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import hosts as hosts_mod

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = HERE / "worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment a rank runs in."""
    env = dict(os.environ)
    # An in-place build (setup.py build_ext --inplace) lives in python/symmwin; use it
    # when present, otherwise whatever `pip install` put on the path.
    if any((ROOT / "python" / "symmwin").glob("_C*.so")):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    # Fail fast instead of waiting the default minute for a missing peer.
    env.setdefault("SYMMWIN_TIMEOUT_MS", "15000")
    env.update(extra or {})
    # A value of None removes the variable (e.g. to test symmwin's defaults).
    return {k: v for k, v in env.items() if v is not None}


class WorldFailed(AssertionError):
    pass


@dataclass
class RankOutcome:
    """How one rank ended: its exit code (negative: killed by that signal), its
    scenario result (None when it wrote none) and its combined stdout/stderr."""

    rank: int
    returncode: int | None
    result: dict | None
    output: str


# What a world runs on and how long it may take, unless a test says otherwise.
DEFAULT_DEVICE = "cpu"
DEFAULT_TIMEOUT = 90.0


def run_ranks(
    world: int,
    scenario: str,
    *,
    device: str = DEFAULT_DEVICE,
    args: dict | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: dict[str, str] | None = None,
    hosts: list[str] | None = None,
    namespaces: bool = False,
) -> tuple[list[RankOutcome], bool]:
    """Run `scenarios.<scenario>(ctx)` on ranks 0..world-1 and return how each ended,
    and whether the world ran past `timeout` (its stragglers are killed). Raises
    nothing: tests of failures judge the outcomes themselves.

    `scenario` may name another module of this directory ("module.function").
    `hosts[r]` puts rank r on a "host": by SYMMWIN_HOST_ID, or with `namespaces` by
    starting the ranks of each host in their own mount and UTS namespaces with a
    private tmpfs on the socket directory (see hosts.py)."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="symmwin-test-") as tmp, hosts_mod.Hosts(
        Path(tmp), hosts if namespaces else None
    ) as machines:
        tmp = Path(tmp)
        procs, logs = [], []
        for rank in range(world):
            log = open(tmp / f"{rank}.log", "w+")
            logs.append(log)
            cmd = [
                sys.executable,
                str(WORKER),
                scenario,
                str(rank),
                str(world),
                str(port),
                device,
                str(tmp / f"{rank}.json"),
                json.dumps(args or {}),
            ]
            rank_env = dict(env or {})
            if hosts and not namespaces:
                rank_env["SYMMWIN_HOST_ID"] = hosts[rank]
            if namespaces:
                cmd = machines.enter(hosts[rank]) + cmd
                rank_env["SYMMWIN_SOCKET_DIR"] = str(machines.socket_dir)
            procs.append(subprocess.Popen(cmd, env=worker_env(rank_env), stdout=log, stderr=subprocess.STDOUT))

        deadline = time.monotonic() + timeout
        timed_out = False
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
        if timed_out:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

        outcomes = []
        for rank, (p, log) in enumerate(zip(procs, logs)):
            log.seek(0)
            output = log.read()
            log.close()
            result_file = tmp / f"{rank}.json"
            result = json.loads(result_file.read_text()) if result_file.exists() else None
            outcomes.append(RankOutcome(rank, p.returncode, result, output))
        return outcomes, timed_out


def run_world(
    world: int,
    scenario: str,
    *,
    killed: tuple[int, ...] = (),
    may_die: tuple[int, ...] = (),
    **launch,
) -> list:
    """Run `scenarios.<scenario>(ctx)` on ranks 0..world-1; return each rank's value.

    `launch` takes the keywords of `run_ranks` (device, args, timeout, env, hosts,
    namespaces), with its defaults; `device` is "cpu" (backend SYMMWIN_HOST) or "cuda"
    (backend SYMMWIN, one GPU per rank). Raises WorldFailed with every rank's error and
    output if any rank raised, exited non-zero or ran past `timeout`. Ranks in `killed`
    must die of SIGKILL; ranks in `may_die` may end without a result (the value of
    either is None).
    """
    outcomes, timed_out = run_ranks(world, scenario, **launch)
    device = launch.get("device", DEFAULT_DEVICE)
    timeout = launch.get("timeout", DEFAULT_TIMEOUT)
    values, problems = [], []
    for o in outcomes:
        if o.rank in killed:
            values.append(None)
            if o.returncode != -signal.SIGKILL:
                problems.append(f"--- rank {o.rank}: exit {o.returncode}, expected SIGKILL\n{o.output[-4000:]}")
            continue
        result = o.result
        values.append(result["value"] if result is not None and result["ok"] else None)
        if o.rank in may_die and result is None:
            continue
        if result is None or not result["ok"] or o.returncode != 0:
            what = result["error"] if result and not result["ok"] else "no result"
            problems.append(f"--- rank {o.rank}: exit {o.returncode}\n{what}\n--- output:\n{o.output[-4000:]}")
    if timed_out or problems:
        head = f"scenario {scenario} (world {world}, {device})"
        head += f" timed out after {timeout:.0f}s" if timed_out else " failed"
        raise WorldFailed(head + "\n" + "\n".join(problems))
    return values
