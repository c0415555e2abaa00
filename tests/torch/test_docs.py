"""The Python guides' code blocks, run as their readers would run them (on CPU).

Every ```python block of the guides below is a test. Its first line says how it runs:

- ``# run: torchrun --nproc-per-node N name.py``: the block is a script, started as N
  ranks with the environment torchrun gives them (RANK, WORLD_SIZE, LOCAL_RANK,
  MASTER_ADDR, MASTER_PORT); every rank must exit 0.
- ``# autoload: torchrun --nproc-per-node N name.py``: as ``run:``, with
  SYMMWIN_AUTOLOAD=1; skipped, with that reason, where symmwin's ``torch.backends``
  entry point is not installed (it comes with the wheel).
- ``# needs a CUDA GPU ...`` / ``# needs CUDA GPUs ...``: skipped here, with that reason.
- ``# signature: ...``: the shape of a call; each ``torch.ops.symmwin.X(...)`` it names
  must exist, and each keyword it passes must be one of the op's arguments.
- ``# part of a program: ...``: compiled (it must be valid Python), not run.
- anything else (no marker): run as a script in one process.

A ``run:`` line that does not parse fails, rather than quietly running one rank.

Also: every variable of the README's configuration table, given a bad value, makes
``import symmwin`` fail with one message naming it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import harness

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ["docs/pytorch.md", "docs/ops.md", "docs/multi-node.md", "docs/clients.md"]
TIMEOUT_S = 180


@dataclass
class Block:
    guide: str
    line: int
    code: str

    @property
    def marker(self) -> str:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first[1:].strip() if first.startswith("#") else ""

    @property
    def id(self) -> str:
        return f"{self.guide}:{self.line}"


def blocks(guide: str) -> list[Block]:
    """The ```python blocks of `guide`, with the line each starts on."""
    text = (ROOT / guide).read_text()
    found = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        found.append(Block(guide, text[: m.start()].count("\n") + 2, m.group(1)))
    return found


ALL = [b for g in GUIDES for b in blocks(g)]


def test_every_guide_has_python_blocks():
    for guide in GUIDES:
        assert blocks(guide), f"{guide}: no ```python block found (did the fence change?)"


def _entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "symmwin" for ep in entry_points(group="torch.backends"))


def _run_ranks(block: Block, world: int, extra: dict[str, str] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="symmwin-docs-") as tmp:
        script = Path(tmp) / "block.py"
        script.write_text(block.code)
        port = harness._free_port()
        procs = []
        for rank in range(world):
            env = harness.worker_env(
                {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(world),
                    "LOCAL_WORLD_SIZE": str(world),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    **(extra or {}),
                }
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script)],
                    env=env,
                    cwd=tmp,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        failures = []
        for rank, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                out, _ = p.communicate()
                failures.append(f"rank {rank} ran past {TIMEOUT_S} s:\n{out}")
                continue
            if p.returncode != 0:
                failures.append(f"rank {rank} exited {p.returncode}:\n{out}")
        assert not failures, f"{block.id}:\n" + "\n".join(failures)


def _check_signature(block: Block) -> None:
    import torch
    import symmwin  # noqa: F401  (registers torch.ops.symmwin)

    tree = ast.parse(block.code)
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("torch.ops.symmwin.")
    ]
    assert calls, f"{block.id}: a signature block names no torch.ops.symmwin op"
    for call in calls:
        name = ast.unparse(call.func).removeprefix("torch.ops.symmwin.")
        packet = getattr(torch.ops.symmwin, name)
        arguments = {a.name for a in packet.default._schema.arguments}
        for kw in call.keywords:
            assert kw.arg in arguments, f"{block.id}: {name} has no argument {kw.arg!r}"
        assert len(call.args) + len(call.keywords) <= len(arguments), f"{block.id}: {name}"


@pytest.mark.parametrize("block", ALL, ids=[b.id for b in ALL])
def test_guide_block(block: Block):
    marker = block.marker
    if marker.startswith("needs"):
        compile(block.code, block.id, "exec")
        pytest.skip(f"{block.id}: {marker}")
    elif marker.startswith("run:"):
        run = re.fullmatch(r"run: torchrun --nproc-per-node (\d+) \S+\.py", marker)
        assert run, f"{block.id}: malformed marker {marker!r}"
        _run_ranks(block, int(run.group(1)))
    elif marker.startswith("autoload:"):
        run = re.fullmatch(r"autoload: torchrun --nproc-per-node (\d+) \S+\.py", marker)
        assert run, f"{block.id}: malformed marker {marker!r}"
        if not _entry_point_installed():
            pytest.skip(f"{block.id}: needs symmwin installed (its torch.backends entry point comes with the wheel)")
        _run_ranks(block, int(run.group(1)), {"SYMMWIN_AUTOLOAD": "1"})
    elif marker.startswith("signature:"):
        _check_signature(block)
    elif marker.startswith("part of a program:"):
        compile(block.code, block.id, "exec")
    else:
        _run_ranks(block, 1)


BAD_SETTINGS = {
    "SYMMWIN_TIMEOUT_MS": ("-5", "is negative"),
    "SYMMWIN_HANDLE_TYPE": ("nvlink", "is not a handle type"),
    "SYMMWIN_OPS_ENGINE": ("bogus", "is not an engine"),
    "SYMMWIN_SOCKET_DIR": ("relative/dir", "is a relative path"),
    "SYMMWIN_STORE_DIR": ("/proc/nope", "cannot be created"),
    "SYMMWIN_LOG": ("symmwin=loud", "is not a log filter"),
    "SYMMWIN_HOST_ID": ("node1 ", "has surrounding whitespace"),
    "SYMMWIN_DEBUG_FREE": ("yes", "is not a switch"),
    "SYMMWIN_AUTOLOAD": ("on", "is not a switch"),
    "SYMMWIN_DEBUG_FREE_KEEP": ("0", "is zero"),
}


def _readme_settings() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(SYMMWIN_[A-Z_]+)`", section, re.M)


def test_every_readme_setting_has_a_bad_value_here():
    assert sorted(_readme_settings()) == sorted(BAD_SETTINGS)


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_a_bad_setting_fails_import_naming_it_once(name: str):
    value, why = BAD_SETTINGS[name]
    env = harness.worker_env({name: value})
    with tempfile.TemporaryDirectory(prefix="symmwin-docs-") as cwd:
        out = subprocess.run(
            [sys.executable, "-c", "import symmwin"],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
        created = list(Path(cwd).iterdir())
    assert out.returncode != 0, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert f'{name}="{value}" {why}' in line and "; allowed: " in line, line
    assert line.count("symmwin [") == 1 and line.count("invalid argument") == 1, line
    assert not created, f"import created {created}"
