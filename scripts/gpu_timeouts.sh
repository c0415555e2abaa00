#!/usr/bin/env bash
# Device-side timeouts on a GPU machine (docs/gpu.md): the Rust GPU tests (a trap in a
# child process, 10,000 in-time signals), then the torch tests without torchrun (a
# SIGKILLed peer in barrier / wait_signal / put_signal at world 2 and 4, torch's
# rank-0-alone pattern, a timeout in graph replay) and the 10,000-round soak, eager and
# replayed. One GPU is enough: the ranks share it.
# Usage: scripts/gpu_timeouts.sh WHEEL OUT_DIR [rust|faults|soak|all]
#   faults = rust + the torch fault tests; soak: the torch soak alone; all: both.
#   WHEEL: a symmwin-*.whl; the rust step also needs symmwin-cuda-lib-tests (the
#   symmwin-cuda crate's unit tests) and cuda_peer_death next to it:
#   scripts/build_gpu_ops_bins.sh DIR builds both.
# Each survivor's exit code and first error lines go to OUT_DIR/timeouts_report.txt.
set -u
wheel="$(realpath "$1")"; out="$(mkdir -p "$2" && cd "$2" && pwd)"; step="${3:-all}"
bin="$(cd "$(dirname "$wheel")" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export SYMMWIN_TIMEOUT_REPORT="$out/timeouts_report.txt"

if [[ "$step" == rust || "$step" == faults || "$step" == all ]]; then
  # The CUDA provider's own GPU tests first (signals eager, on two streams), then the
  # ignored timeout tests.
  bounded "$bin/symmwin-cuda-lib-tests" --nocapture --test-threads=1 \
    > "$out/rust_cuda.log" 2>&1
  echo "rust CUDA provider tests: exit $?; $(grep -E '^test result' "$out/rust_cuda.log")"
  bounded "$bin/symmwin-cuda-lib-tests" --ignored --nocapture --test-threads=1 --exact \
    timeout_tests::ten_thousand_barriers_and_signal_pairs_raise_nothing \
    timeout_tests::device_timeout_traps_then_every_call_reports_it \
    > "$out/rust_timeouts.log" 2>&1
  echo "rust timeout tests: exit $?; $(grep -E '^test result' "$out/rust_timeouts.log")"
  bounded "$bin/cuda_peer_death" --ignored --nocapture --test-threads=1 > "$out/rust_peer_death.log" 2>&1
  echo "rust dead-peer tests: exit $?; $(grep -E '^test result' "$out/rust_peer_death.log")"
  grep -E '^symmwin: device|^synchronize failed|^child ok|raise nothing|per rank in' "$out/rust_timeouts.log"
fi

[[ "$step" == rust ]] && exit 0
gpu_use_wheel "$wheel" || exit 1

if [[ "$step" == faults || "$step" == all ]]; then
  bounded python3 -m pytest tests/torch/test_device_timeouts.py -q -rs -s \
    -k "not in_time" > "$out/pytest_timeouts.log" 2>&1
  echo "pytest timeouts: $(tail -1 "$out/pytest_timeouts.log")"
fi
if [[ "$step" == soak || "$step" == all ]]; then
  bounded python3 -m pytest tests/torch/test_device_timeouts.py -q -rs -s \
    -k "in_time" > "$out/pytest_soak.log" 2>&1
  echo "pytest soak (${SYMMWIN_SOAK_ROUNDS:-10000} rounds): $(tail -1 "$out/pytest_soak.log")"
  grep -E "^rank [0-9]+: \{" "$out/pytest_soak.log"
fi
cat "$SYMMWIN_TIMEOUT_REPORT" 2>/dev/null
