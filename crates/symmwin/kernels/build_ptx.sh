#!/usr/bin/env bash
# Regenerates kernels/*.ptx from kernels/*.cu. Run it on a machine with nvcc
# (CUDA 13.0) and commit the result: the crate embeds the PTX, so installing symmwin
# needs no CUDA toolkit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVCC="${NVCC:-nvcc}"

# build NAME ENTRY...: NAME.cu -> NAME.ptx, checking that every ENTRY is in it.
build() {
  local name="$1"
  shift
  # compute_90 PTX: the driver JIT-compiles it for sm_90 and any newer architecture.
  # No -rdc: the kernels are self-contained and must load with cuModuleLoadData alone.
  "$NVCC" -ptx -arch=compute_90 -O3 -o "$here/$name.ptx.tmp" "$here/$name.cu"
  for entry in "$@"; do
    if ! grep -q "\.entry ${entry}(" "$here/$name.ptx.tmp"; then
      echo "build_ptx.sh: ${entry} missing from the generated PTX" >&2
      rm -f "$here/$name.ptx.tmp"
      exit 1
    fi
  done
  mv "$here/$name.ptx.tmp" "$here/$name.ptx"
  echo "wrote $here/$name.ptx ($("$NVCC" --version | tail -n 1))"
}

build signal symmwin_barrier symmwin_put_signal symmwin_wait_signal
build ops symmwin_ops_all_to_all symmwin_ops_a2av_plan symmwin_ops_a2av_data \
  symmwin_ops_broadcast symmwin_ops_copy symmwin_ops_set_value symmwin_ops_wait_value \
  symmwin_ops_handshake symmwin_ops_tile_reduce
