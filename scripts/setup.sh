#!/usr/bin/env bash
# Installs what the tests and the torch backend need on a fresh Linux machine:
# the Rust toolchain's components, cbindgen, torch 2.11 with ninja and pytest.
# Idempotent: skips what is already there. Python packages go into $PYTHON
# (scripts/test.sh points it at its own .venv).
set -euo pipefail
PY="${PYTHON:-python3}"
TORCH_VERSION="${SYMMWIN_TORCH_VERSION:-2.11.0}"

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version)" != "cbindgen 0.29.4" ]; then
  echo "setup: installing cbindgen 0.29.4"
  cargo install --quiet --locked cbindgen --version 0.29.4
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  echo "setup: installing torch $TORCH_VERSION (large download)"
  "$PY" -m pip install --quiet --progress-bar off "torch==$TORCH_VERSION"
fi
"$PY" -m pip install --quiet --progress-bar off ninja pytest numpy setuptools wheel
