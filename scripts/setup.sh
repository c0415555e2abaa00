#!/usr/bin/env bash
# Installs what the tests and the torch backend need on a fresh Linux machine:
# the Rust toolchain's components, cbindgen, torch 2.11 with ninja and pytest.
# Idempotent: skips what is already there. Python packages go into $PYTHON
# (scripts/test.sh points it at its own .venv).
set -euo pipefail
PY="${PYTHON:-python3}"
TORCH_VERSION="${SYMMWIN_TORCH_VERSION:-2.11.0}"
CBINDGEN_VERSION=0.29.4

# "setup: <what>" as each part starts, "setup: <what>: N s" as it ends.
timed() {
  local what=$1 start=$SECONDS
  shift
  echo "setup: $what"
  "$@"
  echo "setup: $what: $((SECONDS - start)) s"
}

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
timed "rustfmt and clippy" sh -c 'rustup component add rustfmt clippy >/dev/null 2>&1 || true'
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version)" != "cbindgen $CBINDGEN_VERSION" ]; then
  # cbindgen comes from cargo, which builds it from source (about 3 minutes on 2
  # cores), showing its progress; cargo-binstall, where installed, fetches a prebuilt
  # binary instead.
  if command -v cargo-binstall >/dev/null; then
    timed "cbindgen $CBINDGEN_VERSION (prebuilt, cargo binstall)" \
      cargo binstall --no-confirm --locked "cbindgen@$CBINDGEN_VERSION"
  else
    timed "cbindgen $CBINDGEN_VERSION (cargo install: builds from source, a few minutes)" \
      cargo install --locked cbindgen --version "$CBINDGEN_VERSION"
  fi
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  # The default wheel brings its CUDA libraries and Triton: 4.5 GB once installed.
  timed "torch $TORCH_VERSION (large download)" "$PY" -m pip install "torch==$TORCH_VERSION"
fi
timed "ninja, pytest, numpy, setuptools, wheel" \
  "$PY" -m pip install --progress-bar on ninja pytest numpy setuptools wheel
