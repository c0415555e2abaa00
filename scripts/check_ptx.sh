#!/usr/bin/env bash
# Checks that the committed PTX (crates/symmwin-cuda/kernels/*.ptx) is what its .cu sources
# compile to, as scripts/test.sh checks the C header against cbindgen. The compiler is
# NVIDIA's nvcc wheel from PyPI pinned to the release that made the committed PTX (a
# newer nvcc emits different PTX), installed into a scratch virtual environment; no GPU
# or CUDA toolkit is needed. The kernels are compiled in a copy of the kernels directory
# somewhere else, so a pass also shows the output does not depend on the checkout's path.
#
# Usage: scripts/check_ptx.sh            (NVCC_VENV=dir reuses or keeps a venv)
# To update the PTX after changing a kernel, run crates/symmwin-cuda/kernels/build_ptx.sh
# with NVCC pointing at the same nvcc (the venv's nvidia/cu13/bin/nvcc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kernels="$root/crates/symmwin-cuda/kernels"

# The wheels of CUDA 13.0 that nvcc 13.0.88 runs with: the front end (crt headers),
# the device compiler (nvvm) and the runtime headers are separate packages, and pip
# would otherwise pick their newest releases.
pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
venv="${NVCC_VENV:-$scratch/venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
nvcc="$("$venv/bin/python" -c 'import nvidia, pathlib; print(next(pathlib.Path(p) / "cu13/bin/nvcc" for p in nvidia.__path__ if (pathlib.Path(p) / "cu13/bin/nvcc").exists()))')"

copy="$scratch/elsewhere/kernels"
mkdir -p "$copy"
cp "$kernels"/*.cu "$kernels"/*.cuh "$kernels"/build_ptx.sh "$copy"/
NVCC="$nvcc" bash "$copy/build_ptx.sh" >/dev/null

status=0
for ptx in "$kernels"/*.ptx; do
  name="$(basename "$ptx")"
  if ! diff -u "$ptx" "$copy/$name" >"$scratch/$name.diff"; then
    echo "check_ptx.sh: $name does not match its sources (regenerate with build_ptx.sh):" >&2
    head -n 40 "$scratch/$name.diff" >&2
    status=1
  fi
done
if [[ $status -eq 0 ]]; then
  echo "check_ptx.sh: every committed PTX matches its sources ($("$nvcc" --version | tail -n 1))"
fi
exit $status
