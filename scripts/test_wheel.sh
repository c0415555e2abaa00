#!/usr/bin/env bash
# Builds the wheel from this checkout and tests it as a user would: installed into a
# fresh virtual environment outside the source tree, run from a directory outside the
# checkout, with nothing on PYTHONPATH, so no import can come from python/ here.
#
#   scripts/test_wheel.sh [PYTEST ARGS...]     (default: tests/torch -q)
#
# The fresh environment gets torch (and pytest) from the interpreter that builds the
# wheel, through a .pth file, rather than a second multi-gigabyte download; the
# wheel's own site-packages come first on its path, so `import symmwin` finds only
# the wheel. That interpreter: $PYTHON, else .venv/bin/python (scripts/test.sh makes
# it), else python3. Checks, in order: the wheel's name and size; its metadata pins
# the torch minor it was built for; the extension links no CUDA library of torch (one
# wheel serves torch's CPU and CUDA builds of that minor); `import symmwin`; the
# `symmwin` command's host demo; an ImportError naming both versions under another
# torch minor; then the torch suite from the wheel. SYMMWIN_KEEP_WHEEL=DIR keeps the
# wheel there.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
step() { printf '\n==> %s\n' "$*"; }
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY="$root/.venv/bin/python"
else PY=python3; fi
work="$(mktemp -d "${TMPDIR:-/tmp}/symmwin-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT

step "wheel: build ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
t0=$SECONDS
"$PY" -m pip wheel . -w "$work/dist" --no-build-isolation --no-deps --quiet
wheel="$(ls "$work"/dist/symmwin-*.whl)"
echo "$(basename "$wheel"): $(du -h "$wheel" | cut -f1) ($(stat -c %s "$wheel") bytes), built in $((SECONDS - t0)) s"
if [ -n "${SYMMWIN_KEEP_WHEEL:-}" ]; then mkdir -p "$SYMMWIN_KEEP_WHEEL"; cp "$wheel" "$SYMMWIN_KEEP_WHEEL/"; fi

step "wheel: install into a fresh venv outside the checkout"
"$PY" -m venv "$work/venv"
vpy="$work/venv/bin/python"
venv_site="$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Every site directory of the builder: torch and what torch needs may sit in several.
"$PY" -c 'import site; print(*site.getsitepackages(), sep="\n")' > "$venv_site/zz_torch_from_builder.pth"
# --no-index: the torch requirement must be met by the torch already there, never by
# a download; a wrong pin fails here.
"$vpy" -m pip install --quiet --no-index "$wheel"
"$vpy" -m pip show symmwin | grep -E '^(Version|Requires):'

cd "$work"
unset PYTHONPATH
step "wheel: import symmwin, from $PWD"
"$vpy" - "$venv_site" <<'EOF'
import sys
from pathlib import Path

import symmwin

where = Path(symmwin.__file__).resolve()
assert where.is_relative_to(Path(sys.argv[1]).resolve()), f"symmwin imported from {where}, not the wheel"
print("symmwin", symmwin.__version__, "from", where.parent)
EOF

step "wheel: the extension is device-neutral (no CUDA library or symbol of torch)"
ext="$(ls "$venv_site"/symmwin/_C*.so)"
needed="$(readelf -d "$ext" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
echo "needs: $needed"
if grep -qi cuda <<<"$needed"; then echo "the extension links a CUDA library: $needed" >&2; exit 1; fi
if nm -D -C --undefined-only "$ext" | grep -E '(c10|at)::cuda::'; then
  echo "the extension uses torch's CUDA symbols (above): it would not load with torch's CPU build" >&2; exit 1
fi

step "wheel: symmwin demo (host memory)"
"$work/venv/bin/symmwin" --version
"$work/venv/bin/symmwin" demo --provider host --world 2 --size 1M --iters 2

step "wheel: SYMMWIN_AUTOLOAD=1 runs a program that never names symmwin on it"
# torch calls the wheel's torch.backends entry point at the end of `import torch`.
cat > "$work/unmodified.py" <<'EOF'
import sys
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
rank, world = int(sys.argv[1]), 2
dist.init_process_group("gloo", init_method=f"file://{sys.argv[2]}", rank=rank, world_size=world)
backend = symm_mem.get_backend("cpu")
t = symm_mem.empty(16, device="cpu")
t.fill_(rank + 1)
hdl = symm_mem.rendezvous(t, dist.group.WORLD)
hdl.barrier()
assert hdl.get_buffer(1 - rank, (16,), t.dtype).tolist() == [2.0 - rank] * 16
assert t.data_ptr() - hdl.buffer_ptrs[rank] == hdl.offset
hdl.barrier()
dist.destroy_process_group()
print("rank", rank, "ran on", backend)
EOF
if grep -qi symmwin "$work/unmodified.py"; then echo "the unmodified program names symmwin" >&2; exit 1; fi
rm -f "$work/pg"
SYMMWIN_AUTOLOAD=1 "$vpy" "$work/unmodified.py" 0 "$work/pg" > "$work/rank0.out" & first=$!
SYMMWIN_AUTOLOAD=1 "$vpy" "$work/unmodified.py" 1 "$work/pg" > "$work/rank1.out"
wait "$first"
cat "$work/rank0.out" "$work/rank1.out"
grep -q "ran on SYMMWIN_HOST" "$work/rank0.out" && grep -q "ran on SYMMWIN_HOST" "$work/rank1.out"
# Unset, the entry point imports nothing of symmwin and selects nothing; its cost:
"$vpy" -c 'import sys, torch, torch.distributed._symmetric_memory as s
assert s.get_backend("cpu") is None, s.get_backend("cpu")
assert "symmwin" not in sys.modules and "_symmwin_autoload" in sys.modules'
"$vpy" -X importtime -c 'import torch' 2>&1 | awk -F'|' '/_symmwin_autoload *$/ {
  split($1, t, ":"); printf "unset, the entry point costs %d us of import torch\n", t[2] }'

step "wheel: another torch minor is refused by name at import"
mkdir -p "$work/other_torch/torch"
echo '__version__ = "2.99.0"' > "$work/other_torch/torch/__init__.py"
if msg="$(PYTHONPATH="$work/other_torch" "$vpy" -c 'import symmwin' 2>&1)"; then
  echo "import symmwin under torch 2.99 succeeded" >&2; exit 1
fi
last="$(tail -1 <<<"$msg")"
echo "$last"
for want in "ImportError" "torch 2.99.0 is installed" "built against torch 2." "a symmwin wheel built for torch 2.99.0"; do
  grep -qF "$want" <<<"$last" || { echo "the error lacks '$want':" >&2; echo "$msg" >&2; exit 1; }
done

step "wheel: torch tests from the installed wheel"
# The tests and the files they run (bench/, examples/), copied out of the checkout:
# tests/torch/harness.py puts a checkout's python/ on the ranks' path when it holds an
# in-place build, and here only the wheel may be imported.
mkdir -p "$work/src/tests"
cp -r "$root/tests/torch" "$work/src/tests/"
cp -r "$root/bench" "$root/examples" "$root/docs" "$root/README.md" "$work/src/"
cd "$work/src"
# -rs: the reasons of the skipped tests, grouped (the GPU tests skip without a GPU).
if [ $# -eq 0 ]; then set -- tests/torch -q -rs; fi
"$vpy" -m pytest -p no:cacheprovider "$@"
