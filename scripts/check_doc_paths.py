#!/usr/bin/env python3
"""Checks that the docs name files that exist: a reader who follows a path or a file
name in README.md, docs/ or bench/README.md finds it in the checkout.

Checked, in every tracked Markdown file but the records of what was (bench/results/,
CHANGELOG.md):
- every `path/with/slashes` whose first part is a folder of this repository
  (crates/, docs/, ...), from the repository root or from the document's own folder;
  a glob's folder must exist;
- every bare `name.rs` / `name.cuh` (kinds of file only this repository has).
Other projects' files (torch's `CUDASymmetricMemoryOps.cu`, ...) carry neither and are
left alone.

Usage: scripts/check_doc_paths.py   (reads `git ls-files`; exits 1 naming each miss)
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]

# `crates/x/y.rs`, `../docs/gpu.md`, `crates/symmwin/src/ops/` (a folder)
PATH = re.compile(r"`((?:\.\./)*(?:[\w.-]+/)+[\w.*-]*)`")
# `plan.rs`, `ops_vdev.cuh`
BARE = re.compile(r"`([\w-]+\.(?:rs|cuh))`")


class Tree:
    def __init__(self, tracked: list[str]):
        self.files = set(tracked)
        self.folders = {str(parent) for f in tracked for parent in PurePosixPath(f).parents}
        self.basenames = {PurePosixPath(f).name for f in tracked}
        self.top = {f.split("/")[0] for f in tracked if "/" in f and not f.startswith(".")}

    def has(self, ref: str, doc: str) -> bool:
        """Whether `ref`, as written in `doc`, names a tracked file or folder."""
        ref = ref.rstrip("/")
        if "*" in ref:
            ref = ref[: ref.index("*")].rsplit("/", 1)[0]
        for candidate in (ref, posixpath.join(posixpath.dirname(doc), ref)):
            name = posixpath.normpath(candidate)  # `..` resolved by name, not on the disk
            if name in self.files or name in self.folders:
                return True
        return False

    def misses(self, doc: str, text: str) -> list[str]:
        """`doc:line: name` for every file `text` names that the tree lacks."""
        found = []
        for number, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                ref = m.group(1)
                if ref.lstrip("./").split("/")[0] in self.top and not self.has(ref, doc):
                    found.append(f"{doc}:{number}: {ref}")
            for m in BARE.finditer(line):
                if m.group(1) not in self.basenames:
                    found.append(f"{doc}:{number}: {m.group(1)}")
        return found


def is_checked(doc: str) -> bool:
    return doc.endswith(".md") and not doc.startswith(("bench/results/", ".")) and doc != "CHANGELOG.md"


def main() -> int:
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_doc_paths.py: cannot list the checkout's files with git: {e}", file=sys.stderr)
        return 2
    tree = Tree(tracked)
    docs = [d for d in tracked if is_checked(d)]
    # The check itself: a made-up file is a miss, a real one is not.
    assert tree.misses("docs/ops.md", "`crates/symmwin/src/no_such_file.rs` `no_such.rs`") == [
        "docs/ops.md:1: crates/symmwin/src/no_such_file.rs",
        "docs/ops.md:1: no_such.rs",
    ]
    assert not tree.misses("docs/ops.md", "`crates/symmwin/src/ops/` `../README.md`")
    misses = [m for d in docs for m in tree.misses(d, (ROOT / d).read_text())]
    if misses:
        print("files named in the docs that the checkout lacks:", *misses, sep="\n  ", file=sys.stderr)
        return 1
    print(f"doc paths: every file named in {len(docs)} Markdown files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
