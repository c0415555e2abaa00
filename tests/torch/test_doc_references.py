"""The docs name files that exist: a reader who follows a path or a file name in the
README, docs/ or bench/README.md finds it in the checkout.

Checked: every `path/with/slashes` whose first part is a folder of this repository
(crates/, docs/, ...), resolved from the repository root or from the document's own
folder, and every bare `name.rs` / `name.cuh` (file kinds only this repository has).
Names of other projects' files (torch's `CUDASymmetricMemoryOps.cu`, ...) have no
such prefix and are left alone. bench/results/ and CHANGELOG.md are records of what
was, and are not checked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked() -> list[str] | None:
    """The checkout's tracked files, or None where git cannot list them (a copy of
    the tree without .git, no git installed)."""
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.split() or None


LISTED = _tracked()
NOT_LISTED = "not a git checkout: its tracked files cannot be listed"
TRACKED = LISTED or []
FOLDERS = {str(parent) for f in TRACKED for parent in PurePosixPath(f).parents}
BASENAMES = {PurePosixPath(f).name for f in TRACKED}
TOP = sorted({f.split("/")[0] for f in TRACKED if "/" in f and not f.startswith(".")})

DOCS = [
    f
    for f in TRACKED
    if f.endswith(".md") and not f.startswith(("bench/results/", ".")) and f != "CHANGELOG.md"
]

# `crates/x/y.rs`, `../docs/gpu.md`, `crates/symmwin/src/ops/` (a folder)
PATH = re.compile(r"`((?:\.\./)*(?:[\w.-]+/)+[\w.*-]*)`")
# `plan.rs`, `ops_vdev.cuh`
BARE = re.compile(r"`([\w-]+\.(?:rs|cuh))`")


def _exists(ref: str, doc: str) -> bool:
    ref = ref.rstrip("/")
    if "*" in ref:  # a glob: its folder must exist
        ref = ref[: ref.index("*")].rsplit("/", 1)[0]
    here = PurePosixPath(doc).parent
    for candidate in (PurePosixPath(ref), here / ref):
        parts: list[str] = []
        for part in candidate.parts:  # resolve `..` without touching the disk
            if part == "..":
                if parts:
                    parts.pop()
            elif part != ".":
                parts.append(part)
        name = "/".join(parts)
        if name in FOLDERS or name in TRACKED:
            return True
    return False


def _references(doc: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate((ROOT / doc).read_text().splitlines(), 1):
        for m in PATH.finditer(line):
            ref = m.group(1)
            first = ref.lstrip("./").split("/")[0]
            if first in TOP and not _exists(ref, doc):
                found.append((number, ref))
        for m in BARE.finditer(line):
            if m.group(1) not in BASENAMES:
                found.append((number, m.group(1)))
    return found


def test_the_checker_sees_the_docs():
    if LISTED is None:
        pytest.skip(NOT_LISTED)
    assert "README.md" in DOCS and "docs/ops.md" in DOCS, DOCS
    assert "crates" in TOP and "docs" in TOP, TOP


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_doc_names_exists(doc: str):
    missing = [f"{doc}:{line}: {ref}" for line, ref in _references(doc)]
    assert not missing, "files named in the docs that the checkout lacks:\n" + "\n".join(missing)


def test_a_missing_file_is_caught():
    if LISTED is None:
        pytest.skip(NOT_LISTED)
    # The check itself: a made-up path and a made-up Rust file are reported.
    doc = "docs/ops.md"
    assert not _exists("crates/symmwin/src/no_such_file.rs", doc)
    assert _exists("crates/symmwin/src/ops/", doc)
    assert _exists("../README.md", doc)
    assert "no_such_module.rs" not in BASENAMES
