#!/bin/bash
# On a GPU machine, from the wheel (docs/gpu.md): the all-to-all examples (1 rank
# bare, then one rank per GPU under torchrun) and bench/compare.py, all logs and
# results under $OUT (default bench/results).
#
#   bench/run_device.sh WHEEL [compare.py args]
#
# WHEEL is a symmwin-*.whl built where cargo is (scripts/build_gpu_ops_bins.sh DIR).
set -u
wheel="$(realpath "$1")"; shift
OUT="$(mkdir -p "${OUT:-bench/results}" && cd "${OUT:-bench/results}" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export SYMMWIN_JIT_DIR="${SYMMWIN_JIT_DIR:-$OUT/jit}"
NPROC=$(python3 -c "import torch; print(torch.cuda.device_count())")
SECOND_GPU=$((NPROC > 1 ? 1 : 0))

{
  t0=$SECONDS
  # One rank, bare python (default rendezvous settings), both scripts side by side.
  (CUDA_VISIBLE_DEVICES=0 python3 examples/all2all/cuda_push.py --bench-mib 0 2>&1 | sed 's/^/[bare cuda] /') &
  (CUDA_VISIBLE_DEVICES=$SECOND_GPU python3 examples/all2all/triton_push.py --bench-mib 0 2>&1 | sed 's/^/[bare triton] /') &
  wait
  echo "bare runs: $((SECONDS - t0)) s"
  python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC" examples/all2all/cuda_push.py 2>&1
  echo "cuda_push: $((SECONDS - t0)) s"
  python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC" examples/all2all/triton_push.py 2>&1
  echo "triton_push: $((SECONDS - t0)) s"
} 2>&1 | tee "$OUT/examples.log" | grep -E "OK|WRONG|GB/s|passed|failed|Error|error|bare runs|: [0-9]+ s" | grep -v "^.*OK$" | head -60
grep -c " OK" "$OUT/examples.log" | sed 's/^/example checks OK: /'

python3 bench/compare.py --out "$OUT" --raw "$OUT/raw" --nproc "$NPROC" "$@" >"$OUT/compare.stdout" 2>&1
rc=$?
grep -E "^== " "$OUT/compare.stdout"
echo "compare.py rc=$rc"
cat "$OUT/results.md" 2>/dev/null || tail -40 "$OUT/compare.stdout"
