#!/usr/bin/env bash
# Everything that needs the GPU machine, in one call (docs/gpu.md): the core checks,
# a 10,000-cycle rendezvous soak at world 2, the torch backend built from a prebuilt
# static library, the GPU test suite, and the latency/memory part of bench/compare.py.
# Usage: scripts/gpu_all.sh BIN_DIR OUT_DIR   (BIN_DIR: `symmwin`, `libsymmwin_capi.a`)
set -u
bin="$(cd "$1" && pwd)"; out="$2"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
free_mib() { python3 -c "import torch; print(*[torch.cuda.mem_get_info(i)[0] >> 20 for i in range(torch.cuda.device_count())])"; }

scripts/gpu_core.sh "$bin" "$out" > "$out/gpu_core.log" 2>&1
echo "core: $(grep -c '^exit 0' "$out/gpu_core.log") steps passed, $(grep -c '^exit [1-9]' "$out/gpu_core.log") failed"

before=$(free_mib)
"$bin/symmwin" bench rendezvous --provider cuda --world 2 --sizes 2M --iters 10000 > "$out/soak.log" 2>&1
echo "soak (10,000 alloc+rendezvous+free, world 2): exit $?; free MiB before: $before; after: $(free_mib)" | tee -a "$out/soak.log"

if ! SYMMWIN_PREBUILT_LIB="$bin/libsymmwin_capi.a" MAX_JOBS=16 python3 -m pip install -q \
    --no-build-isolation --no-deps --target /tmp/site . > /tmp/build.log 2>&1; then
  tail -30 /tmp/build.log; exit 1
fi
export PYTHONPATH=/tmp/site
python3 -c "import symmwin; print('symmwin', symmwin.__version__)" > "$out/pytest_gpu.log" 2>&1
timeout 330 python3 -m pytest tests/torch -q -rs -k "cuda or gpu or import" >> "$out/pytest_gpu.log" 2>&1
echo "pytest: $(tail -1 "$out/pytest_gpu.log")"
timeout 170 python3 bench/compare.py --no-a2a --backends SYMMWIN CUDA --repeats 3 --out /tmp/cmp > "$out/compare.log" 2>&1
compare_status=$?
cp /tmp/cmp/results.md "$out/results.md" 2>/dev/null
echo "compare: exit $compare_status"
