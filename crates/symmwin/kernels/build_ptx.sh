#!/usr/bin/env bash
# Regenerates kernels/signal.ptx from kernels/signal.cu. Run it on a machine with nvcc
# (CUDA 13.0) and commit the result: the crate embeds the PTX, so installing symmwin
# needs no CUDA toolkit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVCC="${NVCC:-nvcc}"
# compute_90 PTX: the driver JIT-compiles it for sm_90 and any newer architecture.
# No -rdc: the kernels are self-contained and must load with cuModuleLoadData alone.
"$NVCC" -ptx -arch=compute_90 -O3 -o "$here/signal.ptx.tmp" "$here/signal.cu"
for entry in symmwin_barrier symmwin_put_signal symmwin_wait_signal; do
  if ! grep -q "\.entry ${entry}(" "$here/signal.ptx.tmp"; then
    echo "build_ptx.sh: ${entry} missing from the generated PTX" >&2
    rm -f "$here/signal.ptx.tmp"
    exit 1
  fi
done
mv "$here/signal.ptx.tmp" "$here/signal.ptx"
echo "wrote $here/signal.ptx ($("$NVCC" --version | tail -n 1))"
