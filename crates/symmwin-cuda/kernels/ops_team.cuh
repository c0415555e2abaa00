// Who runs a kernel's plan: the whole block (BlockTeam), or warp 0 alone (WarpTeam)
// when the plan's tables fit one warp, one entry a lane. Both offer the same steps
// (for_each_owned, sum2, team_scan, first_bad_entry, sync), so one plan is written
// once, for either. A warp needs no block barrier and no pass over sixteen warps'
// partial sums: its steps are shuffles and warp reductions. Part of the ops module
// (ops.cu); used by ops_vdev.cuh.
//
// Thread t of a team is threadIdx.x in both (the warp team is warp 0), so code that
// gives thread t the peer t, or thread 0 the failure, reads the same for both.
#pragma once

#include "ops_device.cuh"

namespace symmwin_ops {

constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kFullMask = 0xffffffffu;

// No table entry (a thread's `bad` when every entry it read is fine).
constexpr uint32_t kNoEntry = 0xffffffffu;

__shared__ int64_t team_warp_sums[2][kWarps];
__shared__ uint32_t team_first_bad;

__device__ __forceinline__ int64_t warp_sum(int64_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ int64_t warp_inclusive_scan(int64_t v) {
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t o = 1; o < 32; o <<= 1) {
    const int64_t below = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += below;
  }
  return v;
}

// All kThreads threads of the block.
struct BlockTeam {
  static constexpr uint32_t kSize = kThreads;

  __device__ static void sync() { __syncthreads(); }

  // Sums `a` and `b` over the block; every thread gets both.
  __device__ static void sum2(int64_t* a, int64_t* b) {
    const int64_t wa = warp_sum(*a);
    const int64_t wb = warp_sum(*b);
    const uint32_t warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
      team_warp_sums[0][warp] = wa;
      team_warp_sums[1][warp] = wb;
    }
    __syncthreads();
    int64_t sa = 0, sb = 0;
    for (uint32_t w = 0; w < kWarps; ++w) {
      sa += team_warp_sums[0][w];
      sb += team_warp_sums[1][w];
    }
    __syncthreads();  // the sums are read before anyone reuses them
    *a = sa;
    *b = sb;
  }

  // From each warp's inclusive scan (`incl`, at its lane 31): the sum of the warps
  // before this thread's, and of all of them.
  __device__ static void combine_warps(int64_t incl, int64_t* before, int64_t* total) {
    const uint32_t warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 31) {
      team_warp_sums[0][warp] = incl;
    }
    __syncthreads();
    int64_t b = 0, t = 0;
    for (uint32_t w = 0; w < kWarps; ++w) {
      const int64_t x = team_warp_sums[0][w];
      b += w < warp ? x : 0;
      t += x;
    }
    *before = b;
    *total = t;
  }

  // The first table entry that does not fit, over the block, from every thread's `bad`
  // (its own first, kNoEntry for none); every thread gets it. One barrier when no
  // thread found one: only a failure pays for the minimum.
  __device__ static uint32_t first_bad_entry(uint32_t bad) {
    if (threadIdx.x == 0) {
      team_first_bad = kNoEntry;
    }
    if (!__syncthreads_or(bad != kNoEntry)) {
      return kNoEntry;
    }
    if (bad != kNoEntry) {
      atomicMin(&team_first_bad, bad);
    }
    __syncthreads();
    return team_first_bad;
  }
};

// Warp 0 alone. Its steps end with __syncwarp where the block's end with a barrier,
// so shared memory written before a step is seen by every lane after it.
struct WarpTeam {
  static constexpr uint32_t kSize = 32;

  __device__ static void sync() { __syncwarp(); }

  __device__ static void sum2(int64_t* a, int64_t* b) {
    *a = warp_sum(*a);
    *b = warp_sum(*b);
    __syncwarp();
  }

  __device__ static void combine_warps(int64_t incl, int64_t* before, int64_t* total) {
    *before = 0;
    *total = __shfl_sync(kFullMask, incl, 31);
  }

  __device__ static uint32_t first_bad_entry(uint32_t bad) {
    const uint32_t least = __reduce_min_sync(kFullMask, bad);
    __syncwarp();
    return least;
  }
};

// Calls body(i) for every i < count that this thread owns (threadIdx.x, + kSize, ...).
// Every thread of the team runs the same number of rounds, whatever `count`: a loop
// whose trip count differs between the lanes of a warp can leave the warp split in
// two, and every warp shuffle after it then runs on ptxas's slow path for diverged
// warps (the plan at world 1 spent most of its time there; bench/results/
// 2026-12-06-one-gpu-vdev-profile.md). Every loop of a plan goes through here.
template <typename Team, typename Body>
__device__ __forceinline__ void for_each_owned(uint32_t count, Body body) {
  for (uint32_t first = 0; first < count; first += Team::kSize) {
    const uint32_t i = first + threadIdx.x;
    if (i < count) {
      body(i);
    }
  }
}

// Exclusive prefix sums of in[0, count) into out (which may be `in`); returns the
// total. Each thread scans a contiguous run and the warps combine with shuffles, so a
// block synchronises twice whatever the count, a warp never. Called by every thread
// of the team.
template <typename Team>
__device__ int64_t team_scan(const int64_t* in, int64_t* out, uint32_t count) {
  const uint32_t per = (count + Team::kSize - 1) / Team::kSize;
  const uint32_t lo = min(count, threadIdx.x * per);
  const uint32_t hi = min(count, lo + per);
  int64_t mine = 0;
  for (uint32_t k = 0; k < per; ++k) {  // `per` rounds in every thread (see for_each_owned)
    if (lo + k < hi) mine += in[lo + k];
  }
  const int64_t incl = warp_inclusive_scan(mine);
  int64_t before, total;
  Team::combine_warps(incl, &before, &total);
  int64_t run = before + incl - mine;
  for (uint32_t k = 0; k < per; ++k) {
    if (lo + k < hi) {
      const int64_t v = in[lo + k];
      out[lo + k] = run;
      run += v;
    }
  }
  Team::sync();
  return total;
}

}  // namespace symmwin_ops
