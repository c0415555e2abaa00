#!/usr/bin/env python3
"""All-to-all by push over a SYMMWIN window: a CUDA C kernel built with load_inline.

Every rank owns a send buffer of ``world`` chunks and a symmetric receive window of
``world`` slots. Rank ``r`` writes its chunk ``p`` straight into slot ``r`` of peer
``p``'s window (its own chunk into its own window), so after a barrier every rank
holds chunk ``r`` of every peer in slot ``r``.

Two kernels (``--kernel``):

- ``simt``: blocks sized from the SM count, most of them pushing to the remote peers
  (``(world-1)`` groups of ``remote_bpp`` blocks, staggered so that rank ``r`` starts
  with peer ``r+1``) and a few copying the local chunk at the same time. Each thread
  keeps ``unroll`` 16-byte loads in flight before its 16-byte
  stores; a masked tail covers what is not a whole tile, a byte loop what is not a
  whole 16 bytes (or not 16-byte aligned).
- ``tma``: one thread per block drives Hopper's bulk copy engine: tiles go from
  the local send buffer into shared memory (``cp.async.bulk`` completing on an
  mbarrier, ``stages`` deep) and from shared memory to the peer's window
  (``cp.async.bulk.global.shared::cta``), so few threads keep many bytes in flight.

Peers are addressed through torch's pointer array (``hdl.buffer_ptrs_dev``, default)
or arithmetically through ``(base, stride) = symmwin.flat_layout(hdl)``
(``--addressing ptrs|flat|both``).

Run::

    torchrun --nproc_per_node=2 examples/all2all/cuda_push.py
    python3 examples/all2all/cuda_push.py          # one rank, a smoke test
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from push_harness import check_push, default_env, exchange_buffers, finish, init_group, split_grid, time_push

KERNEL_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdexcept>
#include <string>

namespace {

// Coherent (not .nc) loads on purpose: ptxas may sink .nc loads below the stores
// (they cannot alias), which leaves one load in flight per thread instead of UNROLL.
__device__ __forceinline__ uint4 ld_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_v4(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Which peer this block serves, its index among that peer's blocks, and how many
// blocks that peer has. Blocks [0, (world-1)*remote_bpp) push to the remote peers,
// staggered (rank r starts with r+1); the rest copy the local chunk.
struct Assignment {
  int peer;
  int index;
  int count;
};

__device__ __forceinline__ Assignment assign(int rank, int world, int remote_bpp,
                                             int local_blocks) {
  const int b = blockIdx.x;
  const int nremote = (world - 1) * remote_bpp;
  if (b < nremote) {
    return {(rank + 1 + b / remote_bpp) % world, b % remote_bpp, remote_bpp};
  }
  return {rank, b - nremote, local_blocks};
}

__device__ __forceinline__ char* peer_window(void* const* ptrs, uint64_t base,
                                             uint64_t stride, int flat, int peer) {
  return flat ? reinterpret_cast<char*>(base + (uint64_t)peer * stride)
              : reinterpret_cast<char*>(ptrs[peer]);
}

// Byte copy for whatever is not 16-byte aligned: block `index` of `count`.
__device__ __forceinline__ void copy_bytes(char* dst, const char* src, uint64_t n,
                                           int index, int count) {
  for (uint64_t i = (uint64_t)index * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)count * blockDim.x) {
    dst[i] = src[i];
  }
}

// This block's part of the exchange: its assignment, the send chunk for its peer and
// where that chunk goes (slot `rank` of the peer's window).
struct Route {
  Assignment a;
  char* dst;
  const char* src;
};

__device__ __forceinline__ Route route(const char* src, void* const* ptrs, uint64_t base,
                                       uint64_t stride, int flat, uint64_t dst_off,
                                       uint64_t chunk, int rank, int world, int remote_bpp,
                                       int local_blocks) {
  const Assignment a = assign(rank, world, remote_bpp, local_blocks);
  return {a, peer_window(ptrs, base, stride, flat, a.peer) + dst_off + (uint64_t)rank * chunk,
          src + (uint64_t)a.peer * chunk};
}

// A route that is not 16-byte aligned is copied byte by byte here (true: nothing left to do).
__device__ __forceinline__ bool copied_unaligned(const Route& r, uint64_t chunk) {
  if (((uintptr_t)r.dst | (uintptr_t)r.src) & 15) {
    copy_bytes(r.dst, r.src, chunk, r.a.index, r.a.count);
    return true;
  }
  return false;
}

template <int UNROLL>
__global__ void push_simt(const char* __restrict__ src, void* const* __restrict__ ptrs,
                          uint64_t base, uint64_t stride, int flat, uint64_t dst_off,
                          uint64_t chunk, int rank, int world, int remote_bpp,
                          int local_blocks, int pdl) {
  if (pdl) {
    // Programmatic dependent launch: this grid may have been started before the
    // previous kernel of the stream finished; wait for it (and its memory) here,
    // and let the next kernel start its launch now.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  const Route r = route(src, ptrs, base, stride, flat, dst_off, chunk, rank, world, remote_bpp, local_blocks);
  if (copied_unaligned(r, chunk)) return;
  const Assignment a = r.a;
  char* dst = r.dst;
  const char* s = r.src;
  const uint4* s4 = reinterpret_cast<const uint4*>(s);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  const uint64_t nvec = chunk >> 4;
  const uint64_t tile = (uint64_t)blockDim.x * UNROLL;
  const uint64_t full = nvec / tile;
  for (uint64_t t = a.index; t < full; t += a.count) {
    const uint64_t i0 = t * tile + threadIdx.x;
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = ld_v4(s4 + i0 + (uint64_t)u * blockDim.x);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) st_v4(d4 + i0 + (uint64_t)u * blockDim.x, v[u]);
  }
  // Masked tail: the vectors past the last whole tile, then the last < 16 bytes.
  if (a.index == (int)(full % a.count)) {
    for (uint64_t i = full * tile + threadIdx.x; i < nvec; i += blockDim.x) st_v4(d4 + i, ld_v4(s4 + i));
    for (uint64_t i = (nvec << 4) + threadIdx.x; i < chunk; i += blockDim.x) dst[i] = s[i];
  }
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int STAGES>
__global__ void push_tma(const char* __restrict__ src, void* const* __restrict__ ptrs,
                         uint64_t base, uint64_t stride, int flat, uint64_t dst_off,
                         uint64_t chunk, int rank, int world, int remote_bpp,
                         int local_blocks, uint32_t tile) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[STAGES];
  const Route r = route(src, ptrs, base, stride, flat, dst_off, chunk, rank, world, remote_bpp, local_blocks);
  if (copied_unaligned(r, chunk)) return;
  const Assignment a = r.a;
  char* dst = r.dst;
  const char* s = r.src;
  if (threadIdx.x != 0) return;
  const uint64_t body = chunk & ~(uint64_t)15;
  const uint64_t ntiles = (body + tile - 1) / tile;
  const uint64_t mine = (uint64_t)a.index < ntiles ? (ntiles - a.index + a.count - 1) / a.count : 0;
  const uint32_t sbase = smem_u32(smem);
  for (int i = 0; i < STAGES; ++i) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[i])));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");

  auto tile_off = [&](uint64_t k) { return ((uint64_t)a.index + k * a.count) * tile; };
  auto tile_len = [&](uint64_t k) {
    const uint64_t off = tile_off(k);
    return (uint32_t)(body - off < tile ? body - off : tile);
  };
  auto load = [&](uint64_t k) {
    const uint32_t bar = smem_u32(&bars[k % STAGES]);
    const uint32_t len = tile_len(k);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(len)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(sbase + (uint32_t)(k % STAGES) * tile),
        "l"(s + tile_off(k)), "r"(len), "r"(bar)
        : "memory");
  };

  const uint64_t prologue = mine < STAGES ? mine : STAGES;
  for (uint64_t k = 0; k < prologue; ++k) load(k);
  for (uint64_t k = 0; k < mine; ++k) {
    const uint32_t bar = smem_u32(&bars[k % STAGES]);
    const uint32_t parity = (uint32_t)((k / STAGES) & 1);
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra DONE;\n"
        "bra WAIT;\n"
        "DONE:\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + tile_off(k)),
                 "r"(sbase + (uint32_t)(k % STAGES) * tile), "r"(tile_len(k))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Refill the stage of tile k-1 once its store has read shared memory.
    if (k >= 1 && k - 1 + STAGES < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(k - 1 + STAGES);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (a.index == 0) {
    for (uint64_t i = body; i < chunk; ++i) dst[i] = s[i];
  }
#else
  __trap();
#endif
}

__global__ void empty_kernel(int pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

}  // namespace

void push_simt_launch(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride,
                      int64_t flat, int64_t dst_off, int64_t chunk, int64_t rank,
                      int64_t world, int64_t remote_bpp, int64_t local_blocks,
                      int64_t threads, int64_t unroll, int64_t pdl, int64_t stream) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)((world - 1) * remote_bpp + local_blocks));
  cfg.blockDim = dim3((unsigned)threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = reinterpret_cast<cudaStream_t>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t err = cudaSuccess;
#define SYMMWIN_SIMT(U)                                                                    \
  err = cudaLaunchKernelEx(&cfg, push_simt<U>, reinterpret_cast<const char*>(src),         \
                           reinterpret_cast<void* const*>(ptrs_dev), (uint64_t)base,       \
                           (uint64_t)stride, (int)flat, (uint64_t)dst_off, (uint64_t)chunk,\
                           (int)rank, (int)world, (int)remote_bpp, (int)local_blocks,      \
                           (int)pdl)
  switch (unroll) {
    case 1: SYMMWIN_SIMT(1); break;
    case 2: SYMMWIN_SIMT(2); break;
    case 4: SYMMWIN_SIMT(4); break;
    case 8: SYMMWIN_SIMT(8); break;
    default: throw std::invalid_argument("unroll must be 1, 2, 4 or 8");
  }
#undef SYMMWIN_SIMT
  if (err != cudaSuccess) check_launch("push_simt launch");
  check_launch("push_simt");
}

void empty_launch(int64_t pdl, int64_t stream) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = reinterpret_cast<cudaStream_t>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  if (cudaLaunchKernelEx(&cfg, empty_kernel, (int)pdl) != cudaSuccess) check_launch("empty launch");
  check_launch("empty");
}

void push_tma_launch(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride,
                     int64_t flat, int64_t dst_off, int64_t chunk, int64_t rank,
                     int64_t world, int64_t remote_bpp, int64_t local_blocks,
                     int64_t tile, int64_t stages, int64_t stream) {
  if (tile <= 0 || tile % 16 != 0) throw std::invalid_argument("tile must be a positive multiple of 16");
  const dim3 grid((unsigned)((world - 1) * remote_bpp + local_blocks));
  const size_t smem = (size_t)tile * stages;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
#define SYMMWIN_TMA(S)                                                                     \
  do {                                                                                     \
    static size_t granted = 0;                                                             \
    if (smem > granted) {                                                                  \
      if (cudaFuncSetAttribute(push_tma<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,   \
                               (int)smem) != cudaSuccess) check_launch("push_tma smem");   \
      granted = smem;                                                                      \
    }                                                                                      \
    push_tma<S><<<grid, 32, smem, st>>>(                                                   \
        reinterpret_cast<const char*>(src), reinterpret_cast<void* const*>(ptrs_dev),      \
        (uint64_t)base, (uint64_t)stride, (int)flat, (uint64_t)dst_off, (uint64_t)chunk,   \
        (int)rank, (int)world, (int)remote_bpp, (int)local_blocks, (uint32_t)tile);        \
  } while (0)
  switch (stages) {
    case 2: SYMMWIN_TMA(2); break;
    case 4: SYMMWIN_TMA(4); break;
    default: throw std::invalid_argument("stages must be 2 or 4");
  }
#undef SYMMWIN_TMA
  check_launch("push_tma");
}
"""

# The Python-facing wrappers take torch's current stream in C++: asking for it from
# Python (torch.cuda.current_stream()) costs microseconds per launch.
CPP_DECL = r"""
#include <cstdint>
#include <c10/cuda/CUDAStream.h>
void push_simt_launch(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride,
                      int64_t flat, int64_t dst_off, int64_t chunk, int64_t rank,
                      int64_t world, int64_t remote_bpp, int64_t local_blocks,
                      int64_t threads, int64_t unroll, int64_t pdl, int64_t stream);
void push_tma_launch(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride,
                     int64_t flat, int64_t dst_off, int64_t chunk, int64_t rank,
                     int64_t world, int64_t remote_bpp, int64_t local_blocks,
                     int64_t tile, int64_t stages, int64_t stream);
void empty_launch(int64_t pdl, int64_t stream);

static int64_t current_stream() {
  return reinterpret_cast<int64_t>(c10::cuda::getCurrentCUDAStream().stream());
}

void push_simt(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride, int64_t flat,
               int64_t dst_off, int64_t chunk, int64_t rank, int64_t world,
               int64_t remote_bpp, int64_t local_blocks, int64_t threads, int64_t unroll,
               int64_t pdl) {
  push_simt_launch(src, ptrs_dev, base, stride, flat, dst_off, chunk, rank, world,
                   remote_bpp, local_blocks, threads, unroll, pdl, current_stream());
}

void push_tma(int64_t src, int64_t ptrs_dev, int64_t base, int64_t stride, int64_t flat,
              int64_t dst_off, int64_t chunk, int64_t rank, int64_t world,
              int64_t remote_bpp, int64_t local_blocks, int64_t tile, int64_t stages) {
  push_tma_launch(src, ptrs_dev, base, stride, flat, dst_off, chunk, rank, world,
                  remote_bpp, local_blocks, tile, stages, current_stream());
}

void empty(int64_t pdl) { empty_launch(pdl, current_stream()); }
"""

def build(rank: int, world_barrier=None):
    """Build (or load the cached) extension. Rank 0 builds first, the others wait."""
    import torch
    from torch.utils.cpp_extension import load_inline

    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    build_dir = os.environ.get(
        "SYMMWIN_JIT_DIR", os.path.join(os.path.expanduser("~"), ".cache", "symmwin_jit")
    )
    build_dir = os.path.join(build_dir, f"a2a_push_sm{arch}")
    os.makedirs(build_dir, exist_ok=True)

    def load():
        return load_inline(
            name=f"symmwin_a2a_push_sm{arch}",
            cpp_sources=CPP_DECL,
            cuda_sources=KERNEL_SRC,
            functions=["push_simt", "push_tma", "empty"],
            extra_cflags=["-O2"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
            build_directory=build_dir,
            with_pytorch_error_handling=False,
            verbose=False,
        )

    if world_barrier is None:
        return load()
    mod = load() if rank == 0 else None
    world_barrier()
    return mod if mod is not None else load()


@dataclass(frozen=True)
class Config:
    """Launch shape. simt: threads, unroll; tma: tile bytes, stages."""

    kernel: str = "simt"
    blocks_per_sm: int = 2
    threads: int = 512
    unroll: int = 4
    tile: int = 16384
    stages: int = 4
    pdl: bool = False  # simt: programmatic dependent launch

    def label(self) -> str:
        if self.kernel == "tma":
            return f"tma b{self.blocks_per_sm} t{self.tile // 1024}k s{self.stages}"
        return f"simt b{self.blocks_per_sm} t{self.threads} u{self.unroll}" + (" pdl" if self.pdl else "")


def grid_split(sms: int, world: int, chunk: int, cfg: Config) -> tuple[int, int]:
    """(remote blocks per peer, local blocks) from the SM count: see `split_grid`."""
    tile = cfg.tile if cfg.kernel == "tma" else cfg.threads * cfg.unroll * 16
    return split_grid(max(1, cfg.blocks_per_sm * sms), world, max(1, -(-chunk // tile)))


class Pusher:
    """One all-to-all push from `send` (world chunks) into the window `recv`."""

    def __init__(self, mod, hdl, send, recv, flat: bool, cfg: Config, sms: int):
        self.mod = mod
        self.cfg = cfg
        world, rank = hdl.world_size, hdl.rank
        self.chunk = send.numel() * send.element_size() // world
        assert recv.numel() * recv.element_size() >= world * self.chunk
        assert send.is_contiguous() and recv.is_contiguous()
        if flat:
            import symmwin

            base, stride = symmwin.flat_layout(hdl)
        else:
            base, stride = 0, 0
        remote_bpp, local_blocks = grid_split(sms, world, self.chunk, cfg)
        dst_off = hdl.offset + recv.storage_offset() * recv.element_size()
        self.send = send
        self._args = (
            send.data_ptr(),
            hdl.buffer_ptrs_dev,
            base,
            stride,
            int(flat),
            dst_off,
            self.chunk,
            rank,
            world,
            remote_bpp,
            local_blocks,
        )
        if cfg.kernel == "tma":
            self._all = (*self._args, cfg.tile, cfg.stages)
            self._fn = mod.push_tma
        else:
            self._all = (*self._args, cfg.threads, cfg.unroll, int(cfg.pdl))
            self._fn = mod.push_simt

    def __call__(self) -> None:
        self._fn(*self._all)  # on torch's current stream


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--addressing",
        choices=["ptrs", "flat", "both"],
        default="both",
        help="peers through hdl.buffer_ptrs_dev (ptrs) or symmwin.flat_layout (flat)",
    )
    ap.add_argument("--kernel", choices=["simt", "tma", "both"], default="both")
    ap.add_argument(
        "--elems",
        type=int,
        nargs="*",
        default=[1, 257, 4100, 65536, 1 << 22],
        help="int32 elements per peer chunk to check (odd ones exercise the tails)",
    )
    ap.add_argument("--backend", default="SYMMWIN")
    ap.add_argument("--bench-mib", type=float, default=16.0, help="chunk size timed at the end (0: none)")
    args = ap.parse_args()

    default_env(master_port=29531)
    import torch.distributed as dist

    rank, world, group, sms = init_group(args.backend)
    mod = build(rank, world_barrier=dist.barrier)
    kernels = ["simt", "tma"] if args.kernel == "both" else [args.kernel]
    flats = {"ptrs": [False], "flat": [True], "both": [False, True]}[args.addressing]
    failures = 0
    for n in args.elems:
        send, recv, hdl = exchange_buffers(n, rank, world, group)
        for kernel in kernels:
            for flat in flats:
                cfg = Config(kernel=kernel)
                push = Pusher(mod, hdl, send, recv, flat, cfg, sms)
                bad = check_push(hdl, push, recv, rank, world, n)
                failures += bad != 0
                if rank == 0 or bad:
                    print(
                        f"[rank {rank}] {cfg.label():24s} {'flat' if flat else 'ptrs'} "
                        f"{n * 4:>10d} B/peer: {'OK' if bad == 0 else f'{bad} WRONG'}",
                        flush=True,
                    )
        del hdl, recv, send

    if args.bench_mib > 0 and failures == 0:
        n = int(args.bench_mib * (1 << 20)) // 4
        send, recv, hdl = exchange_buffers(n, rank, world, group)
        for kernel in kernels:
            push = Pusher(mod, hdl, send, recv, flats[-1], Config(kernel=kernel), sms)
            us = time_push(push)
            out_bytes = (world - 1) * n * 4
            if rank == 0:
                print(
                    f"[rank 0] {kernel} {'flat' if flats[-1] else 'ptrs'}: {args.bench_mib:g} MiB/peer {us:.1f} us/iter, "
                    f"{out_bytes / us / 1e3:.1f} GB/s leaving the GPU",
                    flush=True,
                )
    return finish(rank, failures)


if __name__ == "__main__":
    sys.exit(main())
