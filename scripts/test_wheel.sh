#!/usr/bin/env bash
# Builds the wheel from this checkout the way the README says and tests it as a user
# would: installed into a fresh virtual environment outside the source tree, run from a
# directory outside the checkout, with nothing on PYTHONPATH, so no import can come
# from python/ here.
#
#   scripts/test_wheel.sh [PYTEST ARGS...]     (default: tests/torch -q -rs)
#
# The README's set-up block (the ```sh block after its "set-up block" marker) runs as
# written, under bash -x, in a fresh venv and in a copy of this checkout's files (what a
# fresh clone has: tracked and untracked files, none that git ignores). The venv gets
# torch (and pytest) from the interpreter that builds the wheel, through a .pth file,
# rather than a second multi-gigabyte download; pip may use its cache. That interpreter:
# $PYTHON, else .venv/bin/python (scripts/test.sh makes it), else python3. Cargo builds
# into $CARGO_TARGET_DIR, else this checkout's target/.
#
# Checks, in order: the README's wheel command in a venv with setuptools 65.5 and no
# `wheel` package stops at once with one line; the set-up block; the build used ninja,
# and finds it without its venv on PATH; the wheel's size (under the README's bound)
# and the newest GLIBCXX its extension needs (docs/gpu.md's figure is the bound); its
# metadata pins the torch minor it was built for; the `symmwin` command starts without
# torch and behaves as the binary; the extension links no CUDA library of torch;
# `import symmwin`; the command's host demo; an ImportError naming both versions under
# another torch minor; then the torch suite from the wheel. SYMMWIN_KEEP_WHEEL=DIR
# keeps the wheel there.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
step() { printf '\n==> %s (at %d s)\n' "$*" "$SECONDS"; }
fail() { echo "scripts/test_wheel.sh: $*" >&2; exit 1; }
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY="$root/.venv/bin/python"
else PY=python3; fi
# The README's figure: the wheel stays under this size.
WHEEL_MAX_BYTES=$((6 * 1000 * 1000))
work="$(mktemp -d "${TMPDIR:-/tmp}/symmwin-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT

step "wheel: the README's set-up block"
block="$work/setup_block.sh"
awk '/<!-- set-up block:/ { marked = 1; next }
     marked && /^```sh$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' README.md > "$block"
[ -s "$block" ] || fail "README.md has no set-up block (a sh block after '<!-- set-up block:')"
cat "$block"
wheel_line="$(grep -m1 '^pip wheel ' "$block")" || fail "the set-up block has no 'pip wheel' line"

# A fresh clone's files, at a fixed place, so that cargo's caches serve the next run.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
checkout="$CARGO_TARGET_DIR/readme-setup/checkout"
rm -rf "$checkout" && mkdir -p "$checkout"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$checkout" -xf -

step "wheel: the README's wheel command with setuptools 65.5 and no wheel package"
# Python 3.10 and 3.11 venvs ship setuptools 65.5, which has no bdist_wheel of its own;
# without build isolation pyproject.toml's requires is not applied, so the pre-flight
# must say so in one line, before any build.
old="$work/old_setuptools"
"$PY" -m venv "$old"
"$old/bin/python" -m pip install --quiet --disable-pip-version-check 'setuptools==65.5.0'
"$old/bin/python" -m pip uninstall --quiet --yes wheel 2>/dev/null || true
t0=$SECONDS
if out="$(cd "$checkout" && PATH="$old/bin:$PATH" VIRTUAL_ENV="$old" bash -c "$wheel_line" 2>&1)"; then
  fail "the wheel command passed with setuptools 65.5 and no wheel package"
fi
grep -F "symmwin build: setuptools 65.5 cannot build a wheel" <<<"$out" \
  || { echo "$out" >&2; fail "no one-line refusal of setuptools 65.5 (above)"; }
if grep -F "invalid command 'bdist_wheel'" <<<"$out"; then fail "setuptools' own error came first"; fi
[ $((SECONDS - t0)) -lt 60 ] || fail "the refusal took $((SECONDS - t0)) s"

step "wheel: the set-up block, in a fresh venv ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
"$PY" -m venv "$work/venv"
vpy="$work/venv/bin/python"
venv_site="$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Every site directory of the builder: torch and what torch needs may sit in several.
"$PY" -c 'import site; print(*site.getsitepackages(), sep="\n")' > "$venv_site/zz_torch_from_builder.pth"
t0=$SECONDS
(cd "$checkout" && PATH="$work/venv/bin:$PATH" VIRTUAL_ENV="$work/venv" bash -eux -o pipefail "$block") \
  2>&1 | tee "$work/setup.log"
build_s=$((SECONDS - t0))
# ninja's progress lines ("[3/13] c++ ..."); torch's fallback compiles without them and
# says "Falling back to using the slow distutils backend".
grep -qE '^ *\[[0-9]+/[0-9]+\] ' "$work/setup.log" \
  || fail "the C++ adapter was not built with ninja (torch fell back to one file at a time)"
if grep -F "Falling back to using the slow distutils backend" "$work/setup.log"; then
  fail "torch did not find ninja in one of the build's steps (above)"
fi
wheel="$(ls "$checkout"/dist/symmwin-*.whl)"
size=$(stat -c %s "$wheel")
echo "$(basename "$wheel"): $size bytes; the set-up block ran in $build_s s"
[ "$size" -lt "$WHEEL_MAX_BYTES" ] || fail "the wheel is $size bytes, over the README's bound of $WHEEL_MAX_BYTES"
if [ -n "${SYMMWIN_KEEP_WHEEL:-}" ]; then mkdir -p "$SYMMWIN_KEEP_WHEEL"; cp "$wheel" "$SYMMWIN_KEEP_WHEEL/"; fi
"$vpy" -m pip show symmwin | grep -E '^(Version|Requires):'

step "wheel: the build finds ninja without its venv on PATH"
# `.venv/bin/python -m pip wheel ...` without activating the venv: the pre-flight puts
# the interpreter's folder (or the ninja package's) on PATH, where torch looks.
"$vpy" - "$checkout" <<'EOF'
import os
import shutil
import sys

sys.path.insert(0, sys.argv[1])
import build_backend  # noqa: E402

# PATH without the folders that hold a ninja: as for an unactivated venv.
os.environ["PATH"] = os.pathsep.join(
    d for d in os.environ["PATH"].split(os.pathsep) if not os.access(os.path.join(d, "ninja"), os.X_OK)
)
assert shutil.which("ninja") is None
build_backend.stop_if_missing(build_backend.EXTENSION)
found = shutil.which("ninja")
assert found, "the pre-flight passed, but ninja is not on PATH"
print(f"ninja not on the given PATH; {found} after the pre-flight")
EOF

ext="$(ls "$venv_site"/symmwin/_C*.so)"
step "wheel: the newest C++ runtime the extension needs, against docs/gpu.md"
newest="$(objdump -T "$ext" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
documented="$(grep -o 'GLIBCXX_[0-9.]*' docs/gpu.md | sort -uV | tail -1)"
echo "the extension needs $newest; docs/gpu.md says $documented at most"
[ "$(printf '%s\n%s\n' "$newest" "$documented" | sort -V | tail -1)" = "$documented" ] \
  || fail "the extension needs $newest, newer than docs/gpu.md's $documented"

step "wheel: the symmwin command starts without torch and behaves as the binary"
cmd="$work/venv/bin/symmwin"
bin="$venv_site/symmwin/bin/symmwin"
t0=$(date +%s%N)
"$cmd" --version
ms=$((($(date +%s%N) - t0) / 1000000))
echo "symmwin --version: $ms ms"
[ "$ms" -lt 200 ] || fail "symmwin --version took $ms ms (does it import torch?)"
mkdir -p "$work/broken_torch/torch"
echo 'raise RuntimeError("this torch is broken")' > "$work/broken_torch/torch/__init__.py"
PYTHONPATH="$work/broken_torch" "$cmd" --version >/dev/null || fail "symmwin --version fails when torch is broken"
SYMMWIN_TIMEOUT_MS=bad "$cmd" --help >/dev/null || fail "symmwin --help fails with SYMMWIN_TIMEOUT_MS=bad"
for args in "--help" "demo --world 0" "demo --world 2 --provider host" "no-such-command"; do
  set +e
  # shellcheck disable=SC2086  # $args is several words on purpose
  ours="$(SYMMWIN_TIMEOUT_MS=bad "$cmd" $args 2>&1)"; ours_rc=$?
  # shellcheck disable=SC2086
  binary="$(SYMMWIN_TIMEOUT_MS=bad "$bin" $args 2>&1)"; binary_rc=$?
  set -e
  if [ "$ours_rc" != "$binary_rc" ] || [ "$ours" != "$binary" ]; then
    printf 'command (exit %s):\n%s\nbinary (exit %s):\n%s\n' "$ours_rc" "$ours" "$binary_rc" "$binary" >&2
    fail "symmwin $args differs from the binary"
  fi
  echo "symmwin $args (SYMMWIN_TIMEOUT_MS=bad): exit $ours_rc, the binary's output"
done

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
needed="$(readelf -d "$ext" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
echo "needs: $needed"
if grep -qi cuda <<<"$needed"; then fail "the extension links a CUDA library: $needed"; fi
if nm -D -C --undefined-only "$ext" | grep -E '(c10|at)::cuda::'; then
  fail "the extension uses torch's CUDA symbols (above): it would not load with torch's CPU build"
fi

step "wheel: symmwin demo (host memory)"
"$cmd" demo --provider host --world 4 --size 1M --iters 3

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
  fail "import symmwin under torch 2.99 succeeded"
fi
last="$(tail -1 <<<"$msg")"
echo "$last"
for want in "ImportError" "torch 2.99.0 is installed" "built against torch 2." "a symmwin wheel built for torch 2.99.0"; do
  grep -qF "$want" <<<"$last" || { echo "$msg" >&2; fail "the error lacks '$want'"; }
done

step "wheel: torch tests from the installed wheel"
# The tests and the files they run (bench/, examples/, the build backend), copied out of
# the checkout: tests/torch/harness.py puts a checkout's python/ on the ranks' path when
# it holds an in-place build, and here only the wheel may be imported.
mkdir -p "$work/src/tests"
cp -r "$root/tests/torch" "$work/src/tests/"
cp -r "$root/bench" "$root/examples" "$root/docs" "$root/README.md" "$root/build_backend.py" "$work/src/"
cd "$work/src"
# -rs: the reasons of the skipped tests, grouped (the GPU tests skip without a GPU);
# --durations: where the time goes, per test.
if [ $# -eq 0 ]; then set -- tests/torch -q -rs --durations=25; fi
"$vpy" -m pytest -p no:cacheprovider "$@"
