#!/usr/bin/env bash
# The ops (torch.ops.symmwin.*) on a GPU machine, from the wheel: the ops' GPU tests
# (several ranks share a GPU when there are fewer GPUs than ranks), the MoE example,
# then a short benchmark (bench/ops.py).
#
# Usage: scripts/gpu_ops.sh WHEEL OUT_DIR [STAGE...]
#   WHEEL: a symmwin-*.whl; the `rust` and `fabric` stages also need cuda_ops (the Rust
#   test binary) next to it: scripts/build_gpu_ops_bins.sh DIR builds both where cargo is.
#   STAGE: rust (kernels through the Rust core, no torch; with it, the NVML fabric
#   domain test, which `fabric` runs alone and shows what it read), gpu (tests/torch/
#   test_ops_gpu.py), generic (tests/torch/test_ops.py on CUDA tensors, and the
#   comparison with torch's NVSHMEM ops where two GPUs are present), hosts (groups
#   spanning hosts: tests/torch/test_hosts.py on CUDA tensors), moe
#   (examples/moe: one rank, then two under torchrun), bench.
#   Default: rust gpu generic moe bench; name one or more to run only those.
# Environment: BENCH=full runs the whole benchmark (every size, 5 repeats).
#   OPS_K narrows the pytest stages to tests matching a pytest -k expression, e.g.
#   OPS_K='not 4 and not 8' keeps worlds 1 to 3 (on one GPU, the worlds of 4 and 8
#   ranks time-slice it and take the longest).
set -u
wheel="$(realpath "$1")"; mkdir -p "$2"; out="$(cd "$2" && pwd)"; shift 2
bin="$(cd "$(dirname "$wheel")" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" || exit 1
stages="${*:-rust gpu generic moe bench}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -c "import symmwin, torch; print('ops registered:', hasattr(torch.ops.symmwin, 'all_to_all_vdev_2d'))"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")

for stage in $stages; do
  case "$stage" in
  rust)
    if [ -x "$bin/cuda_ops" ]; then
      bounded "$bin/cuda_ops" --ignored --test-threads=1 > "$out/rust_cuda_ops.log" 2>&1
      echo "rust cuda_ops: exit $? $(grep -E '^test result' "$out/rust_cuda_ops.log" | tail -1)"
    else
      echo "rust cuda_ops: skipped ($bin/cuda_ops missing; scripts/build_gpu_ops_bins.sh builds it)"
    fi ;;
  fabric)
    bounded "$bin/cuda_ops" --ignored --exact --nocapture \
      fabric_domain_is_read_from_nvml_on_every_device > "$out/rust_fabric_domain.log" 2>&1
    echo "rust fabric domain: exit $? $(grep -E '^test result' "$out/rust_fabric_domain.log")"
    grep -E '^cuda:[0-9]+: fabric domain' "$out/rust_fabric_domain.log" ;;
  gpu)
    bounded python3 -m pytest tests/torch/test_ops_gpu.py -q -rs -k "${OPS_K:-}" \
      > "$out/pytest_ops_gpu.log" 2>&1
    echo "test_ops_gpu: exit $? $(tail -1 "$out/pytest_ops_gpu.log")" ;;
  generic)
    bounded python3 -m pytest tests/torch/test_ops.py -q -rs -k "(cuda or nvshmem)${OPS_K:+ and ($OPS_K)}" \
      > "$out/pytest_ops_cuda.log" 2>&1
    echo "test_ops (cuda): exit $? $(tail -1 "$out/pytest_ops_cuda.log")" ;;
  hosts)
    bounded python3 -m pytest tests/torch/test_hosts.py -q -rs -k "gpu${OPS_K:+ and ($OPS_K)}" \
      > "$out/pytest_hosts_cuda.log" 2>&1
    echo "test_hosts (cuda): exit $? $(tail -1 "$out/pytest_hosts_cuda.log")" ;;
  moe)
    bounded python3 examples/moe/moe_layer.py --device cuda > "$out/moe.log" 2>&1
    echo "moe, one rank: exit $? ($(grep -c ': ok (' "$out/moe.log") ok)"
    bounded python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      examples/moe/moe_layer.py --device cuda >> "$out/moe.log" 2>&1
    echo "moe, torchrun 2 ranks: exit $? ($(grep -c ': ok (' "$out/moe.log") ok in all)" ;;
  bench)
    if [ "${BENCH:-short}" = full ]; then args=(--repeats 5); else args=(--repeats 3 --sizes-kib 4 256 4096 65536); fi
    bounded python3 bench/ops.py --out "$out/bench_ops" --nproc "$gpus" --job-timeout 60 "${args[@]}" \
      > "$out/bench_ops.log" 2>&1
    echo "bench/ops.py ($gpus rank(s), one per GPU): exit $?; table: $out/bench_ops/results.md"
    grep -E "^\| SYMMWIN .*\| graph \| " "$out/bench_ops/results.md" 2>/dev/null | head -12 ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
