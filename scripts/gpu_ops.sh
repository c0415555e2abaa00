#!/usr/bin/env bash
# The ops (torch.ops.symmwin.*) on a GPU machine, from prebuilt binaries: build the
# torch extension, run the GPU tests of the ops (several ranks share a GPU when there
# are fewer GPUs than ranks), then a short benchmark (bench/ops.py).
# Usage: scripts/gpu_ops.sh BIN_DIR OUT_DIR   (BIN_DIR holds `libsymmwin_capi.a`)
# Environment: BENCH=full runs the whole benchmark (every size, 5 repeats).
set -u
bin="$(cd "$1" && pwd)"; out="$2"; mkdir -p "$out"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
site=/tmp/site-ops
rm -rf "$site"
if ! SYMMWIN_PREBUILT_LIB="$bin/libsymmwin_capi.a" MAX_JOBS=16 python3 -m pip install -q \
    --no-build-isolation --no-deps --target "$site" . > "$out/build.log" 2>&1; then
  tail -30 "$out/build.log"; exit 1
fi
export PYTHONPATH="$site"
python3 -c "import symmwin, torch; print('ops registered:', hasattr(torch.ops.symmwin, 'all_to_all_vdev_2d'))"

# The ops' GPU tests: this file's GPU-only scenarios, and the device-generic ops tests
# on CUDA tensors.
timeout 1500 python3 -m pytest tests/torch/test_ops_gpu.py -q -rs > "$out/pytest_ops_gpu.log" 2>&1
echo "test_ops_gpu: exit $? $(tail -1 "$out/pytest_ops_gpu.log")"
timeout 900 python3 -m pytest tests/torch/test_ops.py -q -rs -k cuda > "$out/pytest_ops_cuda.log" 2>&1
echo "test_ops (cuda): exit $? $(tail -1 "$out/pytest_ops_cuda.log")"

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "${BENCH:-short}" = full ]; then
  args=(--repeats 5)
else
  args=(--repeats 3 --sizes-kib 4 256 4096 65536)
fi
timeout 1200 python3 bench/ops.py --out "$out/bench_ops" --nproc "$gpus" "${args[@]}" > "$out/bench_ops.log" 2>&1
echo "bench/ops.py ($gpus rank(s), one per GPU): exit $?; table: $out/bench_ops/results.md"
grep -E "^\| SYMMWIN .* (graph) \| " "$out/bench_ops/results.md" 2>/dev/null | head -12
