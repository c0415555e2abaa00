#!/usr/bin/env bash
# Core checks on a GPU machine (docs/gpu.md), from the wheel: probe, the verified
# all-to-all demo at world 2, 4 and 8 (several ranks share a GPU when there are fewer
# GPUs), the rendezvous benchmark, and a device-memory leak check around the world
# 4 and 8 runs.
# Usage: scripts/gpu_core.sh WHEEL OUT_DIR
set -uo pipefail
wheel="$(realpath "$1")"; mkdir -p "$2"; out="$(cd "$2" && pwd)"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
gpu_use_wheel "$wheel" || exit 1
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
# Device-wide free memory in MiB, per GPU (nvidia-smi shows no per-process use in containers).
free_mib() { python3 -c "import torch; print(*[torch.cuda.mem_get_info(i)[0] >> 20 for i in range(torch.cuda.device_count())])"; }
run() { echo "+ $*"; bounded "$@"; echo "exit $?"; }
symmwin --version
run symmwin probe
symmwin probe --json > "$out/probe.json"
run symmwin demo --provider cuda --world 2 --size 64M --iters 20
run symmwin demo --provider cuda --world 2 --size 16M --iters 20
before=$(free_mib)
run symmwin demo --provider cuda --world 4 --size 4M --iters 20
run symmwin demo --provider cuda --world 8 --size 1M --iters 10
after=$(free_mib)
echo "free device memory (MiB) before the world 4/8 demos: $before; after: $after"
run symmwin bench rendezvous --provider cuda --world 2 --sizes 2M,64M,1G --iters 20
symmwin bench rendezvous --provider cuda --world 2 --sizes 2M,64M,1G --iters 20 --json > "$out/bench_rendezvous_w2.json"
run symmwin bench rendezvous --provider cuda --world 4,8 --sizes 2M,64M --iters 5
