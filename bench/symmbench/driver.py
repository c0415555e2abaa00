"""The driver: one torchrun job per backend, in sequence, each past its limit ended with all its ranks.

A job runs ``SCRIPT --worker BACKEND --json FILE`` (the job's arguments follow) and
writes its results to FILE; a job that fails or hangs becomes a result with an error,
and the next job still runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .examples import SAFE_ENV

# What torchrun sets for its ranks: a job started from inside a torchrun rank must not inherit it.
TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def job_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(SAFE_ENV)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("SYMMWIN_JIT_DIR", "/tmp/symmwin_jit")
    return env


def run_jobs(args, script: Path) -> list[dict]:
    """Every backend of args.backends as one job of `script`; the jobs' logs go to OUT/compare.log."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = Path(args.raw) if args.raw else out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    env = job_env()
    results = []
    with open(out / "compare.log", "a") as log:
        for i, backend in enumerate(args.backends):
            results.append(run_job(args, script, backend, args.port + i, raw / f"{backend}.json", env, log))
    return results


def run_job(args, script: Path, backend: str, port: int, js: Path, env: dict, log) -> dict:
    js.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
        f"--master_port={port}", str(script.resolve()), "--worker", backend,
        "--json", str(js), "--repeats", str(args.repeats), "--sizes-kib", *map(str, args.sizes_kib),
    ] + (["--no-a2a"] if args.no_a2a else [])
    print(f"== {backend}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    limit = args.job_timeout if backend in ("SYMMWIN", "CUDA") else min(args.job_timeout, 75)
    rc, text = run_with_limit(cmd, env, limit)
    log.write(f"== {backend} rc={rc} {time.time() - t0:.0f}s\n{text}\n")
    log.flush()
    tail = "\n".join(text.splitlines()[-6:])
    print(f"== {backend}: rc={rc} in {time.time() - t0:.0f}s\n{tail}", flush=True)
    if js.exists():
        r = json.loads(js.read_text())
        r["rc"] = rc
        return r
    return {"backend": backend, "items": [], "errors": [{"what": "job", "error": f"rc={rc}; see compare.log"}], "rc": rc}


def run_with_limit(cmd: list[str], env: dict, limit: int):
    """(exit status or "timeout after N s", output). The job gets its own session, so that
    one past its limit is ended with all its ranks."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        text, _ = p.communicate(timeout=limit)
        return p.returncode, text
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        return f"timeout after {limit} s", text
