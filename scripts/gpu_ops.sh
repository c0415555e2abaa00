#!/usr/bin/env bash
# torch.ops.symmwin on the GPU machine: the ops' test suite on CUDA tensors (world 2,
# and 4 and 8 with several ranks per GPU), the comparison with torch's NVSHMEM ops
# where two GPUs are present, and the MoE example (one rank, then two under torchrun).
# Usage: scripts/gpu_ops.sh BIN_DIR OUT_DIR   (BIN_DIR holds `libsymmwin_capi.a`)
set -u
bin="$(cd "$1" && pwd)"; out="$2"; mkdir -p "$out"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if ! SYMMWIN_PREBUILT_LIB="$bin/libsymmwin_capi.a" MAX_JOBS=16 python3 -m pip install -q \
    --no-build-isolation --no-deps --target /tmp/site-ops . > /tmp/build-ops.log 2>&1; then
  tail -30 /tmp/build-ops.log; exit 1
fi
export PYTHONPATH=/tmp/site-ops
timeout 540 python3 -m pytest tests/torch/test_ops.py -q -rs -k "cuda or nvshmem" > "$out/pytest_ops_gpu.log" 2>&1
echo "pytest ops (cuda): $(tail -1 "$out/pytest_ops_gpu.log")"
timeout 120 python3 examples/moe/moe_layer.py --device cuda > "$out/moe.log" 2>&1
echo "moe, one rank: exit $? ($(grep -c ': ok (' "$out/moe.log") ok)"
timeout 180 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    examples/moe/moe_layer.py --device cuda >> "$out/moe.log" 2>&1
echo "moe, torchrun 2 ranks: exit $? ($(grep -c ': ok (' "$out/moe.log") ok in all)"
