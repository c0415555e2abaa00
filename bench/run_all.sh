#!/bin/bash
# On a GPU machine, from the wheel (docs/gpu.md): the all-to-all examples (1 rank
# bare, then one rank per GPU under torchrun) and bench/compare.py, every log and
# result in OUT_DIR (bench/results to update the committed tables).
#
#   bench/run_all.sh WHEEL OUT_DIR [compare.py args]
#
# WHEEL is a symmwin-*.whl built where cargo is (scripts/build_gpu_ops_bins.sh DIR).
set -u
if [ $# -lt 2 ]; then
  echo "usage: bench/run_all.sh WHEEL OUT_DIR [compare.py args]" >&2
  exit 2
fi
wheel="$(realpath "$1")"; mkdir -p "$2"; out="$(cd "$2" && pwd)"; shift 2
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export SYMMWIN_JIT_DIR="${SYMMWIN_JIT_DIR:-$out/jit}"
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
} 2>&1 | tee "$out/examples.log" | grep -E "OK|WRONG|GB/s|passed|failed|Error|error|bare runs|: [0-9]+ s" | grep -v "^.*OK$" | head -60
grep -c " OK" "$out/examples.log" | sed 's/^/example checks OK: /'

python3 bench/compare.py --out "$out" --raw "$out/raw" --nproc "$NPROC" "$@" >"$out/compare.stdout" 2>&1
rc=$?
grep -E "^== " "$out/compare.stdout"
echo "compare.py rc=$rc"
cat "$out/results.md" 2>/dev/null || tail -40 "$out/compare.stdout"
