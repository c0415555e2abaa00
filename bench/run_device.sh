#!/bin/bash
# On a GPU machine without cargo: build the torch extension from a prebuilt static
# library, run the all-to-all examples (1 rank bare, then N ranks under torchrun) and
# bench/compare.py, all logs and results under $OUT (default bench/results).
#
#   SYMMWIN_PREBUILT_LIB=/path/libsymmwin_capi.a bench/run_device.sh [compare.py args]
#
# Prepare the library on a machine with cargo:
#   cargo build --release -p symmwin-capi && mkdir -p prebuilt &&
#   cp target/release/libsymmwin_capi.a prebuilt/ && strip --strip-debug prebuilt/libsymmwin_capi.a
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 SYMMWIN_JIT_DIR=/tmp/symmwin_jit TORCH_CUDA_ARCH_LIST=9.0
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
LIB=${SYMMWIN_PREBUILT_LIB:-$PWD/prebuilt/libsymmwin_capi.a}
NPROC=$(nvidia-smi -L | wc -l)

t0=$SECONDS
if ! SYMMWIN_PREBUILT_LIB=$LIB MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps \
    --target /tmp/site . >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
echo "extension built in $((SECONDS - t0)) s"

{
  t0=$SECONDS
  # One rank, bare python (default rendezvous settings), both scripts side by side.
  (CUDA_VISIBLE_DEVICES=0 python3 examples/all2all/cuda_push.py --bench-mib 0 2>&1 | sed 's/^/[bare cuda] /') &
  (CUDA_VISIBLE_DEVICES=1 python3 examples/all2all/triton_push.py --bench-mib 0 2>&1 | sed 's/^/[bare triton] /') &
  wait
  echo "bare runs: $((SECONDS - t0)) s"
  torchrun --nproc_per_node="$NPROC" --master_port=29541 examples/all2all/cuda_push.py 2>&1
  echo "cuda_push: $((SECONDS - t0)) s"
  torchrun --nproc_per_node="$NPROC" --master_port=29542 examples/all2all/triton_push.py 2>&1
  echo "triton_push: $((SECONDS - t0)) s"
} 2>&1 | tee "$OUT/examples.log" | grep -E "OK|WRONG|GB/s|passed|failed|Error|error|bare runs|: [0-9]+ s" | grep -v "^.*OK$" | head -60
grep -c " OK" "$OUT/examples.log" | sed 's/^/example checks OK: /'

python3 bench/compare.py --out "$OUT" --raw /tmp/symmwin_raw --nproc "$NPROC" "$@" >"$OUT/compare.stdout" 2>&1
rc=$?
grep -E "^== " "$OUT/compare.stdout"
echo "compare.py rc=$rc"
cat "$OUT/results.md" 2>/dev/null || tail -40 "$OUT/compare.stdout"
