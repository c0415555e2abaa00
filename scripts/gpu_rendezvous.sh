#!/usr/bin/env bash
# Rendezvous latency on a GPU machine from the wheel (docs/gpu.md): the Rust
# API with the phase split (`symmwin bench rendezvous`: --fresh keeps every window
# alive; without it every iteration frees, so from the second on it re-allocates), then
# bench/rendezvous.py through torch: SYMMWIN beside torch's CUDA and NVSHMEM backends,
# fresh and re-allocated windows of 2 MiB, 64 MiB and 1 GiB at world 2, 4 and 8 (ranks
# share the GPUs round-robin), TORCH_SYMMMEM_IMPLICIT_POOL=0. The Rust tables also count
# store operations and socket messages per rank per rendezvous (store, msgs columns).
# Usage: scripts/gpu_rendezvous.sh WHEEL OUT_DIR   (WORLDS="2 4 8" by default)
set -u
wheel="$(realpath "$1")"; mkdir -p "$2"; out="$(cd "$2" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" || exit 1
worlds="${WORLDS:-2 4 8}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

bounded symmwin bench rendezvous --provider cuda --world "${worlds// /,}" \
  --sizes 2M,64M,1G --iters 5 --fresh > "$out/rust_fresh.log" 2>&1
echo "symmwin bench rendezvous --fresh: exit $?"
bounded symmwin bench rendezvous --provider cuda --world "${worlds// /,}" \
  --sizes 2M,64M,1G --iters 10 > "$out/rust_realloc.log" 2>&1
echo "symmwin bench rendezvous: exit $?"

# shellcheck disable=SC2086
bounded python3 bench/rendezvous.py --worlds $worlds --repeats 7 \
  --job-timeout 90 --out "$out/torch" > "$out/torch.log" 2>&1
echo "bench/rendezvous.py: exit $?"

echo; echo "== Rust API, fresh windows (ms, phase split)"
grep -v '^\s*$' "$out/rust_fresh.log" | tail -14
echo; echo "== Rust API, re-allocation of the size just freed (ms, phase split)"
grep -v '^\s*$' "$out/rust_realloc.log" | tail -14
echo; echo "== through torch"
cat "$out/torch/rendezvous.md" 2>/dev/null || tail -20 "$out/torch.log"
