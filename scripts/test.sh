#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: set-up, lint, the committed C header,
# Rust tests (unit, multi-process on host memory, doc tests, and the C guide's example
# built with make and run as two processes), the torch backend built against the
# installed torch and its multi-process tests on host memory.
# GPU tests run on a machine with GPUs (docs/gpu.md); here they are skipped.
#
# Python packages (torch if missing, pytest, ninja, and symmwin itself) go into a
# virtual environment of its own, .venv, made with --system-site-packages so that an
# installed torch is reused instead of downloaded again. PYTHON=/path/to/python
# installs into that interpreter instead (e.g. an environment you manage).
set -euo pipefail
cd "$(dirname "$0")/.."
# One line as each step starts and one with its time as it ends; the total at the end.
STEP="" STEP_START=$SECONDS
end_step() {
  if [ -n "$STEP" ]; then printf '<== %s: %d s\n' "$STEP" $((SECONDS - STEP_START)); fi
  STEP=""
}
step() {
  end_step
  STEP="$*" STEP_START=$SECONDS
  printf '\n==> %s (at %d s)\n' "$*" "$SECONDS"
}
finish() {
  local status=$?
  if [ "$status" -ne 0 ] && [ -n "$STEP" ]; then
    printf '<== %s: FAILED after %d s\n' "$STEP" $((SECONDS - STEP_START))
  else
    end_step
  fi
  printf '\nscripts/test.sh: %s in %d min %d s\n' \
    "$([ "$status" -eq 0 ] && echo passed || echo failed)" $((SECONDS / 60)) $((SECONDS % 60))
}
trap finish EXIT

step setup
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
  echo "installing Python packages into $("$PY" -c 'import sys; print(sys.prefix)') (PYTHON is set)"
else
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv --system-site-packages .venv || {
      echo "cannot create .venv (on Debian/Ubuntu: apt install python3-venv), or set PYTHON=..." >&2
      exit 1
    }
  fi
  PY="$PWD/.venv/bin/python"
  echo "installing Python packages into $PWD/.venv"
fi
PYTHON="$PY" scripts/setup.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "crate graph is the layers"
scripts/check_crate_graph.sh

step "docs name files that exist"
"$PY" scripts/check_doc_paths.py

step "symmwin builds without CUDA (--no-default-features)"
cargo check -p symmwin --no-default-features --all-targets

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "C header matches the code"
cbindgen --quiet --config crates/symmwin-capi/cbindgen.toml --crate symmwin-capi \
  --output target/symmwin.h crates/symmwin-capi
diff -u crates/symmwin-capi/include/symmwin.h target/symmwin.h

step "cargo test"
cargo test --workspace

step "committed PTX matches its sources (pinned nvcc from PyPI)"
scripts/check_ptx.sh

# The torch backend is built and tested as users get it: from the wheel, built by the
# README's set-up block and installed into a fresh environment outside the checkout;
# the README's demo (host memory, world 4) runs from the wheel's `symmwin` command.
step "wheel: build, install, test"
scripts/test_wheel.sh
