#!/usr/bin/env bash
# Where cargo is (no GPU needed): everything the GPU machine needs, into DIR: the
# wheel (symmwin-*.whl, for the torch installed here; docs/gpu.md) and the Rust GPU
# test binaries that are not part of it: cuda_ops (the ops kernels through the Rust
# core, for scripts/gpu_ops.sh's rust stage), symmwin-cuda-lib-tests (the CUDA
# backend's unit tests), symmwin-lib-tests (the runtime's unit tests) and
# cuda_peer_death (device waits for a dead peer), for scripts/gpu_timeouts.sh's rust
# stage.
# Usage: scripts/build_gpu_ops_bins.sh DIR   (PYTHON: the interpreter with torch; default python3)
set -euo pipefail
mkdir -p "$1"; bin="$(cd "$1" && pwd)"
cd "$(dirname "$0")/.."
"${PYTHON:-python3}" -m pip wheel . -w "$bin" --no-build-isolation --no-deps -v
test_exe() {
  cargo test --release "$@" --no-run --message-format=json \
    | python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])'
}
cp "$(test_exe -p symmwin --test cuda_ops)" "$bin/cuda_ops"
cp "$(test_exe -p symmwin-cuda --lib)" "$bin/symmwin-cuda-lib-tests"
cp "$(test_exe -p symmwin --lib)" "$bin/symmwin-lib-tests"
cp "$(test_exe -p symmwin --test cuda_peer_death)" "$bin/cuda_peer_death"
ls -la "$bin"
