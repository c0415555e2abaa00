// tile_reduce and multi_root_tile_reduce. Part of the ops module (ops.cu).
#pragma once

#include "ops_device.cuh"

// A named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with
// a hash of the source path, so the committed PTX would differ between checkouts.
using namespace symmwin_ops;

// =================================================================================
// tile_reduce / multi_root_tile_reduce: each root pulls its tile from every rank and
// sums it (fp32 accumulation for 16/32-bit types, fp64 for fp64, in rank order) into its `out` tile. No multicast.
//
// Tiles: `rows` rows of `bytes` bytes, `row_bytes` apart (unit inner stride). `roots`
// is a bit set of the ranks that are roots; this rank reduces `src` (its tile, the
// same offset on every rank) into `dst` when it is a root. Every rank tells each root
// its tile is final and waits until the root is done reading it.
// Grid: blocks_per_peer. Channels: [channel, +bpp) ready, [channel + bpp, +bpp) done.

namespace symmwin_ops {

__device__ __forceinline__ bool is_root(const OpsParams& p, uint32_t r) {
  return (p.roots[r / 64] >> (r % 64)) & 1ull;
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float load_elem(const char* row, uint64_t i, uint32_t dtype) {
  switch (dtype) {
    case SYMMWIN_DTYPE_F32: return reinterpret_cast<const float*>(row)[i];
    case SYMMWIN_DTYPE_BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    default: return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

__device__ __forceinline__ void store_elem(char* row, uint64_t i, uint32_t dtype, float v) {
  switch (dtype) {
    case SYMMWIN_DTYPE_F32: reinterpret_cast<float*>(row)[i] = v; break;
    case SYMMWIN_DTYPE_BF16: reinterpret_cast<uint16_t*>(row)[i] = f32_to_bf16(v); break;
    default: reinterpret_cast<uint16_t*>(row)[i] = f32_to_f16(v); break;
  }
}

__device__ __forceinline__ uint32_t elem_size(uint32_t dtype) {
  return dtype == SYMMWIN_DTYPE_F64 ? 8 : (dtype == SYMMWIN_DTYPE_F32 ? 4 : 2);
}

// Share `part` of `parts` of the tile's rows: out = sum over ranks of their tiles.
__device__ void reduce_rows(const OpsParams& p, uint32_t part, uint32_t parts) {
  const uint64_t cols = p.bytes / elem_size(p.mode);
  int64_t lo, hi;
  share(static_cast<int64_t>(p.rows), part, parts, &lo, &hi);
  const uint64_t n = static_cast<uint64_t>(hi - lo) * cols;
  char* out = operand_at(p.dst, p.rank);
  for (uint64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const uint64_t row = static_cast<uint64_t>(lo) + k / cols;
    const uint64_t col = k % cols;
    if (p.mode == SYMMWIN_DTYPE_F64) {
      double acc = 0.0;
      for (uint32_t r = 0; r < p.world; ++r) {
        acc += reinterpret_cast<const double*>(operand_at(p.src, r) + row * p.row_bytes)[col];
      }
      reinterpret_cast<double*>(out + row * p.row_bytes)[col] = acc;
      continue;
    }
    float acc = 0.0f;
    for (uint32_t r = 0; r < p.world; ++r) {
      acc += load_elem(operand_at(p.src, r) + row * p.row_bytes, col, p.mode);
    }
    store_elem(out + row * p.row_bytes, col, p.mode, acc);
  }
}

}  // namespace symmwin_ops

extern "C" __global__ void __launch_bounds__(kThreads)
    symmwin_ops_tile_reduce(const __grid_constant__ OpsParams p) {
  const uint32_t part = blockIdx.x;
  const uint32_t bpp = p.blocks_per_peer;
  const uint32_t ready = p.channel + part;
  const uint32_t done = p.channel + bpp + part;
  const uint32_t t = threadIdx.x;
  const bool root = is_root(p, p.rank);
  const bool peer = is_peer_thread(p);
  const bool peer_is_root = peer && is_root(p, t);
  // Every rank tells each root its tile is final; a root waits for every rank.
  peer_handshake(p, ready, ready, peer_is_root, root && peer);
  __syncthreads();
  if (root) {
    reduce_rows(p, part, bpp);
  }
  __syncthreads();
  // A root tells every rank it is done reading; every rank waits for each root.
  peer_handshake(p, done, done, root && peer, peer_is_root);
}
