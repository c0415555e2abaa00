// The all_to_all_vdev family as it ran before the fused kernel (kernels/ops_vdev.cuh):
// a one-block plan kernel, then a pull kernel, as two launches. Kept for
// bench/fixed_cost.cu only, which times both forms side by side in one run; symmwin
// itself launches symmwin_ops_a2av. Include after ops.cu (it uses recv_index and the
// helpers of ops_device.cuh).
#pragma once

// =================================================================================
// all_to_all_vdev family: plan (one block), then a pull (many blocks).
//
// Layouts (torch 2.11 semantics; rows are `row_bytes` long):
//   1-D:        in_splits[world]; out_splits_offsets[2][world]: rows received from
//               each source and where they start in `out` (exclusive prefix sum).
//   2-D:        in_splits[world * ne], rank-major (peer, expert); out_splits_offsets
//               [2][ne * world], expert-major (expert, source); each expert's rows start
//               at a multiple of major_align and take at least major_align rows.
//   2-D offset: in_splits_offsets[2][ne * world], expert-major (expert, peer), with
//               explicit input offsets; out_splits_offsets[2][world * ne], rank-major
//               (source, expert), no alignment.

namespace symmwin_ops {

// What source `s` sends this rank for segment e, read from s's split table.
__device__ __forceinline__ int64_t split_from(const OpsParams& p, uint32_t s, uint32_t e) {
  const char* t = operand_at(p.src_splits, s);
  uint64_t i;
  switch (p.mode) {
    case SYMMWIN_A2AV_1D: i = p.rank; break;
    case SYMMWIN_A2AV_2D: i = static_cast<uint64_t>(p.rank) * p.experts + e; break;
    default: i = static_cast<uint64_t>(e) * p.world + p.rank; break;
  }
  return load_i64(t + i * sizeof(int64_t));
}

__shared__ int64_t plan_splits[SYMMWIN_OPS_MAX_SPLITS];
__shared__ int64_t plan_major_len[SYMMWIN_OPS_MAX_SPLITS];
__shared__ int64_t plan_partial[kThreads];

// Before telling peers they may read our input: every split this rank sends is
// non-negative and inside our own input. All threads check in parallel; only a
// failure walks the table in order to name the first split that does not fit.
__device__ void check_own_splits(const OpsParams& p) {
  const char* t = operand_at(p.src_splits, p.rank);
  const uint32_t n = p.world * p.experts;
  const int64_t in_rows = static_cast<int64_t>(p.src.bytes / p.row_bytes);
  const bool offsets = p.mode == SYMMWIN_A2AV_2D_OFFSET;
  int64_t acc = 0;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t rows = load_i64(t + i * sizeof(int64_t));
    if (offsets) {
      const int64_t off = load_i64(t + (n + i) * sizeof(int64_t));
      if (rows < 0 || off < 0 || rows > in_rows || off > in_rows - rows) {
        fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i % p.world, rows, off + rows, in_rows);
      }
    } else if (rows < 0 || rows > in_rows) {
      fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i / p.experts, rows, rows, in_rows);
    }
    acc += rows;
  }
  if (offsets) {
    return;
  }
  plan_partial[threadIdx.x] = acc;
  __syncthreads();
  for (uint32_t stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      plan_partial[threadIdx.x] += plan_partial[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && plan_partial[0] > in_rows) {
    int64_t end = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const int64_t rows = load_i64(t + i * sizeof(int64_t));
      if (rows > in_rows - end) {
        fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i / p.experts, rows, end + rows, in_rows);
      }
      end += rows;
    }
  }
}

}  // namespace symmwin_ops

// One block. Handshake with every peer (each tells the others its input and split
// table are final), gather the splits sent to this rank, write out_splits_offsets,
// and stop before anything is copied if they do not fit `out`.
// Channel: p.channel.
extern "C" __global__ void __launch_bounds__(kThreads)
    bench_a2av_plan(const __grid_constant__ OpsParams p) {
  check_own_splits(p);
  __syncthreads();
  const uint32_t t = threadIdx.x;
  peer_handshake(p, p.channel, p.channel, is_peer_thread(p), is_peer_thread(p));
  __syncthreads();
  const uint32_t n = p.world * p.experts;
  for (uint32_t i = t; i < n; i += blockDim.x) {
    const uint32_t s = i / p.experts;
    const uint32_t e = i % p.experts;
    plan_splits[recv_index(p, s, e)] = split_from(p, s, e);
  }
  __syncthreads();
  // Row-major view: `major` rows of `minor` entries; 2-D aligns each major row.
  const uint32_t minor = p.mode == SYMMWIN_A2AV_2D_OFFSET ? p.experts : p.world;
  const uint32_t major = n / minor;
  for (uint32_t m = t; m < major; m += blockDim.x) {
    int64_t len = 0;
    for (uint32_t c = 0; c < minor; ++c) len += plan_splits[m * minor + c];
    if (p.mode == SYMMWIN_A2AV_2D) {
      const int64_t a = p.major_align;
      const int64_t aligned = (len + a - 1) / a * a;
      len = aligned > a ? aligned : a;
    }
    plan_major_len[m] = len;
  }
  __syncthreads();
  if (t == 0) {
    int64_t start = 0;
    for (uint32_t m = 0; m < major; ++m) {
      const int64_t len = plan_major_len[m];
      plan_major_len[m] = start;
      start += len;
    }
  }
  __syncthreads();
  char* table = operand_at(p.dst_splits, p.rank);
  int64_t* out_splits = reinterpret_cast<int64_t*>(table);
  int64_t* out_offsets = out_splits + n;
  const int64_t room = static_cast<int64_t>(p.dst.bytes / p.row_bytes);
  for (uint32_t m = t; m < major; m += blockDim.x) {
    int64_t off = plan_major_len[m];
    for (uint32_t c = 0; c < minor; ++c) {
      const uint32_t i = m * minor + c;
      const int64_t rows = plan_splits[i];
      out_splits[i] = rows;
      out_offsets[i] = off;
      if (off + rows > room) {
        const uint32_t src = p.mode == SYMMWIN_A2AV_2D_OFFSET ? m : c;
        fail_split(p, SYMMWIN_OPS_ERR_OVERFLOW, src, rows, off, room);
      }
      off += rows;
    }
  }
}

namespace symmwin_ops {

__shared__ int64_t seg_src[SYMMWIN_OPS_MAX_EXPERTS];
__shared__ int64_t seg_dst[SYMMWIN_OPS_MAX_EXPERTS];
__shared__ int64_t seg_rows[SYMMWIN_OPS_MAX_EXPERTS];
__shared__ int64_t seg_partial[kThreads];

// Sum of s's in_splits[0, count), by the whole block.
__device__ int64_t block_prefix(const char* table, uint32_t count) {
  int64_t acc = 0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    acc += load_i64(table + i * sizeof(int64_t));
  }
  seg_partial[threadIdx.x] = acc;
  __syncthreads();
  for (uint32_t stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      seg_partial[threadIdx.x] += seg_partial[threadIdx.x + stride];
    }
    __syncthreads();
  }
  const int64_t total = seg_partial[0];
  __syncthreads();
  return total;
}

// The segments source `s` sends this rank: where each starts in s's input, where it
// lands in `out`, how many rows.
__device__ void load_segments(const OpsParams& p, uint32_t s) {
  const char* theirs = operand_at(p.src_splits, s);
  const int64_t* mine = reinterpret_cast<const int64_t*>(operand_at(p.dst_splits, p.rank));
  const uint32_t n = p.world * p.experts;
  int64_t base = 0;
  if (p.mode != SYMMWIN_A2AV_2D_OFFSET) {
    base = block_prefix(theirs, p.rank * p.experts);
  }
  for (uint32_t e = threadIdx.x; e < p.experts; e += blockDim.x) {
    const uint32_t i = recv_index(p, s, e);
    seg_rows[e] = mine[i];
    seg_dst[e] = mine[n + i];
    if (p.mode == SYMMWIN_A2AV_2D_OFFSET) {
      seg_src[e] = load_i64(theirs + (n + static_cast<uint64_t>(e) * p.world + p.rank) * sizeof(int64_t));
    }
  }
  __syncthreads();
  if (p.mode != SYMMWIN_A2AV_2D_OFFSET && threadIdx.x == 0) {
    for (uint32_t e = 0; e < p.experts; ++e) {
      seg_src[e] = base;
      base += seg_rows[e];
    }
  }
  __syncthreads();
}

}  // namespace symmwin_ops

// Grid: world * blocks_per_peer. Block b pulls share b % bpp of what source
// (rank + 1 + b / bpp) % world sends this rank, then tells the source it is done
// reading and waits until the source is done reading from us.
// Channels: [channel + 1, channel + 1 + bpp).
extern "C" __global__ void __launch_bounds__(kThreads)
    bench_a2av_data(const __grid_constant__ OpsParams p) {
  const uint32_t bpp = p.blocks_per_peer;
  const uint32_t s = (p.rank + 1 + blockIdx.x / bpp) % p.world;
  const uint32_t part = blockIdx.x % bpp;
  load_segments(p, s);
  int64_t total = 0;
  for (uint32_t e = 0; e < p.experts; ++e) total += seg_rows[e];
  int64_t lo, hi;
  share(total, part, bpp, &lo, &hi);
  const char* in = operand_at(p.src, s);
  char* out = operand_at(p.dst, p.rank);
  int64_t first = 0;
  for (uint32_t e = 0; e < p.experts && first < hi; ++e) {
    const int64_t a = lo > first ? lo : first;
    const int64_t b = hi < first + seg_rows[e] ? hi : first + seg_rows[e];
    if (a < b) {
      const uint64_t skip = static_cast<uint64_t>(a - first);
      copy_part(out + (seg_dst[e] + skip) * p.row_bytes, in + (seg_src[e] + skip) * p.row_bytes,
                static_cast<uint64_t>(b - a) * p.row_bytes, 0, 1);
    }
    first += seg_rows[e];
  }
  if (s == p.rank) {
    return;
  }
  const uint32_t done = p.channel + 1 + part;
  block_signal(p, s, done);
  if (threadIdx.x == 0) {
    wait_peer(p, s, done);
  }
}

