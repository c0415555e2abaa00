#!/usr/bin/env bash
# The ops (torch.ops.symmwin.*) on a GPU machine, from prebuilt binaries: build the
# torch extension, run the ops' GPU tests (several ranks share a GPU when there are
# fewer GPUs than ranks), the MoE example, then a short benchmark (bench/ops.py).
#
# Usage: scripts/gpu_ops.sh BIN_DIR OUT_DIR [STAGE...]
#   BIN_DIR holds libsymmwin_capi.a and, for the `rust` stage, cuda_ops (the Rust test
#   binary); scripts/build_gpu_ops_bins.sh BIN_DIR builds both where cargo is.
#   STAGE: rust (kernels through the Rust core, no torch; with it, the NVML fabric
#   domain test, which `fabric` runs alone and shows what it read), gpu (tests/torch/
#   test_ops_gpu.py), generic (tests/torch/test_ops.py on CUDA tensors, and the
#   comparison with torch's NVSHMEM ops where two GPUs are present), hosts (groups
#   spanning hosts: tests/torch/test_hosts.py on CUDA tensors), moe
#   (examples/moe: one rank, then two under torchrun), bench.
#   Default: all five (up to 17 minutes on one H200); run them one per call when a
#   call has less time. The extension is built once per machine (kept in /tmp/site-ops).
# Environment: BENCH=full runs the whole benchmark (every size, 5 repeats).
#   OPS_K narrows the pytest stages to tests matching a pytest -k expression, e.g.
#   OPS_K='not 4 and not 8' keeps worlds 1 to 3 (a short first pass on one GPU).
set -u
bin="$(cd "$1" && pwd)"; out="$2"; shift 2; mkdir -p "$out"
stages="${*:-rust gpu generic moe bench}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
site=/tmp/site-ops
if [ ! -d "$site/symmwin" ] || [ "$bin/libsymmwin_capi.a" -nt "$site/symmwin" ]; then
  rm -rf "$site"
  if ! SYMMWIN_PREBUILT_LIB="$bin/libsymmwin_capi.a" MAX_JOBS=16 python3 -m pip install -q \
      --no-build-isolation --no-deps --target "$site" . > "$out/build.log" 2>&1; then
    tail -30 "$out/build.log"; exit 1
  fi
fi
export PYTHONPATH="$site"
python3 -c "import symmwin, torch; print('ops registered:', hasattr(torch.ops.symmwin, 'all_to_all_vdev_2d'))"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")

for stage in $stages; do
  case "$stage" in
  rust)
    if [ -x "$bin/cuda_ops" ]; then
      timeout 200 "$bin/cuda_ops" --ignored --test-threads=1 > "$out/rust_cuda_ops.log" 2>&1
      echo "rust cuda_ops: exit $? $(grep -E '^test result' "$out/rust_cuda_ops.log" | tail -1)"
    else
      echo "rust cuda_ops: skipped ($bin/cuda_ops missing; scripts/build_gpu_ops_bins.sh builds it)"
    fi ;;
  fabric)
    timeout 60 "$bin/cuda_ops" --ignored --exact --nocapture \
      fabric_domain_is_read_from_nvml_on_every_device > "$out/rust_fabric_domain.log" 2>&1
    echo "rust fabric domain: exit $? $(grep -E '^test result' "$out/rust_fabric_domain.log")"
    grep -E '^cuda:[0-9]+: fabric domain' "$out/rust_fabric_domain.log" ;;
  gpu)
    timeout 420 python3 -m pytest tests/torch/test_ops_gpu.py -q -rs -k "${OPS_K:-}" \
      > "$out/pytest_ops_gpu.log" 2>&1
    echo "test_ops_gpu: exit $? $(tail -1 "$out/pytest_ops_gpu.log")" ;;
  generic)
    timeout 420 python3 -m pytest tests/torch/test_ops.py -q -rs -k "(cuda or nvshmem)${OPS_K:+ and ($OPS_K)}" \
      > "$out/pytest_ops_cuda.log" 2>&1
    echo "test_ops (cuda): exit $? $(tail -1 "$out/pytest_ops_cuda.log")" ;;
  hosts)
    timeout 420 python3 -m pytest tests/torch/test_hosts.py -q -rs -k "gpu${OPS_K:+ and ($OPS_K)}" \
      > "$out/pytest_hosts_cuda.log" 2>&1
    echo "test_hosts (cuda): exit $? $(tail -1 "$out/pytest_hosts_cuda.log")" ;;
  moe)
    timeout 120 python3 examples/moe/moe_layer.py --device cuda > "$out/moe.log" 2>&1
    echo "moe, one rank: exit $? ($(grep -c ': ok (' "$out/moe.log") ok)"
    timeout 180 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      examples/moe/moe_layer.py --device cuda >> "$out/moe.log" 2>&1
    echo "moe, torchrun 2 ranks: exit $? ($(grep -c ': ok (' "$out/moe.log") ok in all)" ;;
  bench)
    if [ "${BENCH:-short}" = full ]; then args=(--repeats 5); else args=(--repeats 3 --sizes-kib 4 256 4096 65536); fi
    timeout 150 python3 bench/ops.py --out "$out/bench_ops" --nproc "$gpus" --job-timeout 60 "${args[@]}" \
      > "$out/bench_ops.log" 2>&1
    echo "bench/ops.py ($gpus rank(s), one per GPU): exit $?; table: $out/bench_ops/results.md"
    grep -E "^\| SYMMWIN .*\| graph \| " "$out/bench_ops/results.md" 2>/dev/null | head -12 ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
