#!/usr/bin/env bash
# Builds what scripts/gpu_ops.sh needs on a machine with cargo (the GPU machine has
# none): the static library for the torch extension and the CUDA ops test binary.
# Usage: scripts/build_gpu_ops_bins.sh BIN_DIR
set -euo pipefail
bin="$1"; mkdir -p "$bin"
cargo build --release -p symmwin-capi -p symmwin-cli
cp target/release/libsymmwin_capi.a target/release/symmwin "$bin/"
strip --strip-debug "$bin/libsymmwin_capi.a"
exe=$(cargo test --release -p symmwin --test cuda_ops --no-run --message-format=json \
  | python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
cp "$exe" "$bin/cuda_ops"
ls -la "$bin"
