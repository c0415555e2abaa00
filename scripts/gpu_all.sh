#!/usr/bin/env bash
# Everything for a GPU machine in one run (docs/gpu.md), from the wheel: the core
# checks, a 10,000-cycle rendezvous soak at world 2, the GPU test suite and the
# latency/memory part of bench/compare.py.
# Usage: scripts/gpu_all.sh WHEEL OUT_DIR
set -u
wheel="$(realpath "$1")"; mkdir -p "$2"; out="$(cd "$2" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" > "$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
free_mib() { python3 -c "import torch; print(*[torch.cuda.mem_get_info(i)[0] >> 20 for i in range(torch.cuda.device_count())])"; }

scripts/gpu_core.sh "$wheel" "$out" > "$out/gpu_core.log" 2>&1
echo "core: $(grep -c '^exit 0' "$out/gpu_core.log") steps passed, $(grep -c '^exit [1-9]' "$out/gpu_core.log") failed"

before=$(free_mib)
bounded symmwin bench rendezvous --provider cuda --world 2 --sizes 2M --iters 10000 > "$out/soak.log" 2>&1
echo "soak (10,000 alloc+rendezvous+free, world 2): exit $?; free MiB before: $before; after: $(free_mib)" | tee -a "$out/soak.log"

cat "$out/install.log" > "$out/pytest_gpu.log"
bounded python3 -m pytest tests/torch -q -rs -k "cuda or gpu or import" >> "$out/pytest_gpu.log" 2>&1
echo "pytest: $(tail -1 "$out/pytest_gpu.log")"
bounded python3 bench/compare.py --no-a2a --backends SYMMWIN CUDA --repeats 3 --out "$out/compare" > "$out/compare.log" 2>&1
compare_status=$?
cp "$out/compare/results.md" "$out/results.md" 2>/dev/null
echo "compare: exit $compare_status"
