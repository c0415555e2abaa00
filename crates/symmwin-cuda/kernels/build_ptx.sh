#!/usr/bin/env bash
# Regenerates the committed PTX of every kernel file (kernels/<name>.cu ->
# kernels/<name>.ptx). Run it with nvcc 13.0.88 (NVCC=path; the pinned PyPI wheels that
# scripts/check_ptx.sh installs give exactly this compiler) and commit the result: the
# crate embeds the PTX, so installing symmwin needs no CUDA toolkit. check_ptx.sh fails CI
# when the committed PTX is not what the sources compile to. Kernel sources use named
# namespaces, never anonymous ones: nvcc mangles those with a hash of the file's path.
#
# Kernel files include shared device headers from this directory (wait.cuh: timed waits
# that report and trap); each .cu is compiled on its own into one self-contained module.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVCC="${NVCC:-nvcc}"

# name: the entry points its PTX must define.
declare -A entries=(
  [signal]="symmwin_barrier symmwin_put_signal symmwin_wait_signal"
  [ops]="symmwin_ops_all_to_all symmwin_ops_a2av symmwin_ops_broadcast symmwin_ops_copy symmwin_ops_set_value symmwin_ops_wait_value symmwin_ops_handshake symmwin_ops_tile_reduce"
)

# The only outside function a module may call: device printf, which the driver's JIT
# resolves at cuModuleLoadData. Anything else would fail to load without a linker.
allowed_extern='vprintf'
ptxas="$(dirname "$(command -v "$NVCC")")/ptxas"

build() {
  local name="$1" src="$here/$1.cu" tmp="$here/$1.ptx.tmp"
  # compute_90 PTX: the driver JIT-compiles it for sm_90 and any newer architecture.
  # No -rdc: the module must load with cuModuleLoadData alone.
  "$NVCC" -ptx -arch=compute_90 -O3 -I "$here" -o "$tmp" "$src"
  for entry in ${entries[$name]}; do
    if ! grep -q "\.entry ${entry}(" "$tmp"; then
      echo "build_ptx.sh: ${entry} missing from the PTX of $name.cu" >&2
      rm -f "$tmp"
      exit 1
    fi
  done
  local externs
  externs="$(grep -oE '^\.extern \.func +(\([^)]*\) +)?[A-Za-z_][A-Za-z0-9_]*' "$tmp" |
    awk '{print $NF}' | grep -vxE "$allowed_extern" || true)"
  if [[ -n "$externs" ]]; then
    echo "build_ptx.sh: $name.cu calls functions outside its module: $externs" >&2
    rm -f "$tmp"
    exit 1
  fi
  # Kernels take their params as `const __grid_constant__`: without it, a kernel whose
  # helpers take the params by reference gets a private copy of them in local memory
  # in every thread (288 bytes x 512 threads per block for OpsParams), which cost more
  # than a small op's data. A local frame that large means the copy is back.
  local big_frames
  big_frames="$(awk '/^\.visible \.entry/ { entry = $3; sub(/\(.*/, "", entry) }
    /^\.func|^\.weak \.func/ { entry = "" }
    entry != "" && /__local_depot[0-9]+\[/ {
      size = $0; sub(/.*\[/, "", size); sub(/\].*/, "", size)
      if (size + 0 >= 256) print entry " (" size " bytes)"; entry = "" }' "$tmp")"
  if [[ -n "$big_frames" ]]; then
    echo "build_ptx.sh: kernels with a large local frame (params not __grid_constant__?): $big_frames" >&2
    rm -f "$tmp"
    exit 1
  fi
  # What cuModuleLoadData will do: assemble the module alone, with nothing to link.
  if [[ -x "$ptxas" ]] && ! "$ptxas" -arch=sm_90 -o /dev/null "$tmp"; then
    echo "build_ptx.sh: the PTX of $name.cu does not assemble on its own" >&2
    rm -f "$tmp"
    exit 1
  fi
  mv "$tmp" "$here/$name.ptx"
  echo "wrote $here/$name.ptx"
}

for name in "${!entries[@]}"; do
  build "$name"
done
"$NVCC" --version | tail -n 1
