// Device helpers of the ops kernels: operand and pad addressing, the split and
// operand-mismatch failures (record, print, trap), the fingerprinted pad signals and
// handshakes, and the vectorised block copy. Included by every ops kernel file.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ops_params.cuh"  // includes wait.cuh
#include "pads.cuh"

namespace symmwin_ops {

// A point on a kernel's path: bench/fixed_cost.cu's trace build (--trace) defines it to
// record the SM clock of block 0's thread 0 there; it is nothing otherwise.
#ifndef SYMMWIN_OPS_TRACE_POINT
#define SYMMWIN_OPS_TRACE_POINT(i) ((void)0)
#endif

constexpr uint32_t kErrorFlag = 1u << 31;
constexpr uint32_t kThreads = SYMMWIN_OPS_THREADS;

// ---------------------------------------------------------------------------------
// Addressing

__device__ __forceinline__ char* operand_at(const Operand& o, uint32_t rank) {
  return reinterpret_cast<char*>(o.base + static_cast<uint64_t>(rank) * o.stride + o.offset);
}

__device__ __forceinline__ uint32_t* pad_slot(const OpsParams& p, uint32_t owner,
                                               uint32_t channel, uint32_t src) {
  return symmwin::pad_word(p.pad_base, p.pad_stride, owner, p.world, channel, src);
}

// ---------------------------------------------------------------------------------
// Splits that do not fit (timeouts are reported by wait.cuh)

// wait.cuh's flush-then-trap, in one out-of-line copy for the three failures below.
__device__ __noinline__ void trap_after_print() { symmwin::flush_then_trap(); }

// Claimed by the first thread of this module to record a split failure, as wait.cuh's
// g_report_claimed is by the first timeout report. Several blocks can find a bad
// split at once; checking the word alone let two of them both see it clear and write
// their fields over each other, so the host could read one failure's kind with
// another's rows. External linkage for the same reason as g_report_claimed.
__device__ uint32_t g_split_failure_claimed;

// First writer wins, across the blocks of this launch (the claim) and the kernels
// before it (a word already set); the fields are written before the word, so the
// host never sees a word without its details.
__device__ void record_split_failure(const OpsParams& p, uint32_t kind, uint32_t peer,
                                     int64_t rows, int64_t room) {
  OpsError* e = reinterpret_cast<OpsError*>(p.err);
  volatile uint32_t* word = &e->word;
  if (atomicCAS(&g_split_failure_claimed, 0u, 1u) == 0u && *word == 0) {
    e->kind = kind;
    e->op = p.wait.op;
    e->rank = p.rank;
    e->rows = rows;
    e->room = room;
    __threadfence_system();
    *word = kErrorFlag | (peer & ~kErrorFlag);
    __threadfence_system();
  }
}

// A split-table entry that cannot be honoured; stop here. SYMMWIN_OPS_ERR_OVERFLOW:
// `rows` from `peer` at row `row` do not fit `out` (room for `room` rows), nothing has
// been copied. SYMMWIN_OPS_ERR_BAD_SPLIT: a split of `rows` this rank sends `peer` ends
// at row `row`, negative or past its own input of `room` rows, nothing has been sent.
__device__ __noinline__ void fail_split(const OpsParams& p, uint32_t kind, uint32_t peer,
                                        int64_t rows, int64_t row, int64_t room) {
  record_split_failure(p, kind, peer, rows, room);
  const char* format =
      kind == SYMMWIN_OPS_ERR_OVERFLOW
          ? "symmwin: device %s on rank %u: %lld rows from rank %u at row %lld do not fit "
            "out (room for %lld rows); nothing was copied; trapping, the CUDA context is "
            "lost and the process must exit\n"
          : "symmwin: device %s on rank %u: a split of %lld rows for rank %u ends at row "
            "%lld, outside the input (%lld rows) or negative; nothing was sent; trapping, "
            "the CUDA context is lost and the process must exit\n";
  printf(format, symmwin::op_name(p.wait.op), p.rank, static_cast<long long>(rows), peer,
         static_cast<long long>(row), static_cast<long long>(room));
  trap_after_print();
}

// A peer's signal carried another operand fingerprint than ours: it called the op
// with other operands (dtype, shape, root, engine) or another op. Nothing of this
// op's data has moved past the signal; stop here.
__device__ __noinline__ void fail_mismatch(const OpsParams& p, uint32_t peer, uint32_t theirs) {
  record_split_failure(p, SYMMWIN_OPS_ERR_MISMATCH, peer, theirs, p.fingerprint);
  printf("symmwin: device %s on rank %u: ranks disagree on the operands: rank %u has "
         "fingerprint %#010x, this rank %#010x (every rank must pass the same dtype, shape, "
         "root and engine); trapping, the CUDA context is lost and the process must exit\n",
         symmwin::op_name(p.wait.op), p.rank, peer, theirs, p.fingerprint);
  trap_after_print();
}

// ---------------------------------------------------------------------------------
// Signals: the pad protocol through wait.cuh's timed waits, which report and trap.
// Every signal of an op carries the op's operand fingerprint (`p.fingerprint`, never
// 0) instead of torch's constant 1, and every wait takes only a signal with its own
// fingerprint: one CAS per spin, as with the constant, so the check costs nothing.

// Put `p.fingerprint` into `slot`, `peer`'s slot on `channel`, once it is free (CAS
// 0 -> value, release). Returns 0 on success, else the time waited; traps if `peer`
// ends first.
__device__ __forceinline__ uint64_t timed_put_fingerprint(const OpsParams& p, uint32_t* slot,
                                                          uint32_t peer, uint32_t channel) {
  const uint32_t mine = p.fingerprint;
  return symmwin::spin_for_peer(
      [slot, mine] { return symmwin::cas_release(slot, 0u, mine) == 0u; }, p.wait, peer,
      channel);
}

// Take `peer`'s signal on `channel` from `slot` (CAS value -> 0, acquire). Any signal
// ends the wait; one with another value stays in the slot and is returned in `seen`
// (the caller fails). Returns 0 on success, else the time waited; traps if `peer` ends
// first.
__device__ __forceinline__ uint64_t timed_take_fingerprint(const OpsParams& p, uint32_t* slot,
                                                           uint32_t peer, uint32_t channel,
                                                           uint32_t* seen) {
  const uint32_t mine = p.fingerprint;
  uint32_t old = mine;
  const uint64_t waited = symmwin::spin_for_peer(
      [slot, mine, &old] {
        old = symmwin::cas_acquire(slot, mine, 0u);
        return old != 0u;
      },
      p.wait, peer, channel);
  *seen = waited == 0 ? old : mine;
  return waited;
}

// One thread signals `dst` on `channel`: everything it (and, after a barrier, its
// block) wrote is visible to `dst` first. Waits while `dst` has not consumed the
// previous signal of the slot.
__device__ __forceinline__ void signal_peer(const OpsParams& p, uint32_t dst, uint32_t channel) {
  const uint64_t waited = timed_put_fingerprint(p, pad_slot(p, dst, channel, p.rank), dst, channel);
  if (waited != 0) {
    const uint32_t late[1] = {dst};
    symmwin::report_and_trap(p.wait, channel, late, 1, 1, waited, 0);
  }
}

// No peer waits for an answer to this wait (see wait_peer_answering).
constexpr uint32_t kNoAnswer = 0xffffffffu;

// One thread waits for `src`'s signal on `channel`; its later reads are ordered after
// it. When `src` will itself wait for our answer on `answer_channel`, a mismatch sends
// our fingerprint there first, so that peer's wait fails too, naming this rank,
// instead of waiting out its timeout for an answer that never comes.
__device__ __forceinline__ void wait_peer_answering(const OpsParams& p, uint32_t src,
                                                    uint32_t channel, uint32_t answer_channel) {
  uint32_t seen;
  const uint64_t waited =
      timed_take_fingerprint(p, pad_slot(p, p.rank, channel, src), src, channel, &seen);
  if (waited != 0) {
    const uint32_t late[1] = {src};
    symmwin::report_and_trap(p.wait, channel, late, 1, 1, waited, 0);
  }
  if (seen != p.fingerprint) {
    if (answer_channel != kNoAnswer) {
      signal_peer(p, src, answer_channel);
    }
    fail_mismatch(p, src, seen);
  }
}

__device__ __forceinline__ void wait_peer(const OpsParams& p, uint32_t src, uint32_t channel) {
  wait_peer_answering(p, src, channel, kNoAnswer);
}

// Thread 0 of the block signals `peer` after every thread of the block is done.
__device__ __forceinline__ void block_signal(const OpsParams& p, uint32_t peer, uint32_t channel) {
  __syncthreads();
  if (threadIdx.x == 0) {
    signal_peer(p, peer, channel);
  }
}

// Thread 0 waits for `peer`; the barrier makes the wait cover the whole block.
__device__ __forceinline__ void block_wait(const OpsParams& p, uint32_t peer, uint32_t channel) {
  if (threadIdx.x == 0) {
    wait_peer(p, peer, channel);
  }
  __syncthreads();
}

__shared__ symmwin::BlockTimeouts block_timeouts;

// Thread t (a peer of this rank) signals t on `put_channel` when `put`, then waits
// for t on `wait_channel` when `wait`; one report names every late peer. Called by
// every thread of the block (it synchronizes).
__device__ void peer_handshake(const OpsParams& p, uint32_t put_channel, uint32_t wait_channel,
                               bool put, bool wait) {
  const bool takes_part = put || wait;
  const uint32_t participants = __syncthreads_count(takes_part);
  if (threadIdx.x == 0) {
    block_timeouts.init(participants);
  }
  __syncthreads();
  if (!takes_part) {
    return;
  }
  const uint32_t t = threadIdx.x;
  uint64_t waited = 0;
  uint32_t channel = put_channel;
  if (put) {
    waited = timed_put_fingerprint(p, pad_slot(p, t, put_channel, p.rank), t, put_channel);
  }
  uint32_t seen = p.fingerprint;
  if (waited == 0 && wait) {
    channel = wait_channel;
    waited = timed_take_fingerprint(p, pad_slot(p, p.rank, wait_channel, t), t, wait_channel, &seen);
  }
  if (seen != p.fingerprint) {
    fail_mismatch(p, t, seen);
  }
  block_timeouts.finish(p.wait, channel, t, waited);
}

// Whether thread t stands for a peer of this rank.
__device__ __forceinline__ bool is_peer_thread(const OpsParams& p) {
  return threadIdx.x < p.world && threadIdx.x != p.rank;
}

// ---------------------------------------------------------------------------------
// Copies

// Coherent loads on purpose: ptxas may sink .nc loads below the stores, leaving one
// load in flight per thread instead of kUnroll.
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

constexpr int kUnroll = 4;

// Part `part` of `parts` (each a block of kThreads, as every ops kernel is launched)
// copies its share of `n` bytes: 16-byte loads and stores, kUnroll in flight per
// thread, when both ends are 16-byte aligned; bytes otherwise (odd row sizes). The
// tile is a compile-time size, so no 64-bit division runs before the first load.
__device__ void copy_part(char* dst, const char* src, uint64_t n, uint32_t part, uint32_t parts) {
  if (n == 0) {
    return;
  }
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) != 0) {
    for (uint64_t i = static_cast<uint64_t>(part) * kThreads + threadIdx.x; i < n;
         i += static_cast<uint64_t>(parts) * kThreads) {
      dst[i] = src[i];
    }
    return;
  }
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  const uint64_t nvec = n >> 4;
  constexpr uint64_t kTile = static_cast<uint64_t>(kThreads) * kUnroll;
  const uint64_t full = nvec / kTile;
  for (uint64_t t = part; t < full; t += parts) {
    const uint64_t i0 = t * kTile + threadIdx.x;
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = ld_v4(s4 + i0 + static_cast<uint64_t>(u) * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) st_v4(d4 + i0 + static_cast<uint64_t>(u) * kThreads, v[u]);
  }
  // The vectors past the last whole tile (fewer than a tile) and the last < 16 bytes go
  // to one part: no division when there are fewer tiles than parts (every small op),
  // a 32-bit one below 2^32 tiles. The vectors move as one tile, its loads all in
  // flight before the first store: a loop of one load and its store per round waited
  // a memory round trip per 8 KiB, up to four for a share that ends inside a tile
  // (every MoE segment of a block's rows).
  const uint32_t tail_part = full < parts    ? static_cast<uint32_t>(full)
                             : full >> 32 ? static_cast<uint32_t>(full % parts)
                                          : static_cast<uint32_t>(full) % parts;
  if (part == tail_part) {
    const uint64_t i0 = full * kTile + threadIdx.x;
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t i = i0 + static_cast<uint64_t>(u) * kThreads;
      if (i < nvec) v[u] = ld_v4(s4 + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t i = i0 + static_cast<uint64_t>(u) * kThreads;
      if (i < nvec) st_v4(d4 + i, v[u]);
    }
    for (uint64_t i = (nvec << 4) + threadIdx.x; i < n; i += kThreads) {
      dst[i] = src[i];
    }
  }
}

// The peer block blockIdx.x serves in a grid of world * blocks_per_peer blocks, and its
// share of that peer's data: peer (rank + 1 + b / bpp) % world (staggered, so ranks
// start on different peers), share b % bpp. Without a division where it can: every
// block runs this first, ahead of its plan. A power-of-two bpp (grid.rs's at a
// power-of-two world size) shifts, and rank + 1 + b / bpp is below 2 * world, so one
// subtraction wraps it.
__device__ __forceinline__ void peer_and_share(const OpsParams& p, uint32_t* peer, uint32_t* part) {
  const uint32_t bpp = p.blocks_per_peer;
  uint32_t slot;
  if ((bpp & (bpp - 1)) == 0) {
    slot = blockIdx.x >> (__ffs(static_cast<int>(bpp)) - 1);
    *part = blockIdx.x & (bpp - 1);
  } else {
    slot = blockIdx.x / bpp;
    *part = blockIdx.x - slot * bpp;
  }
  const uint32_t staggered = p.rank + 1 + slot;
  *peer = staggered >= p.world ? staggered - p.world : staggered;
}

// Rows [lo, hi) of `parts` equal shares of `total` rows (>= 0), for share `part`. A
// power-of-two count of parts (grid.rs's at a power-of-two world size) shifts: the
// 64-bit division is a call, in the chain of dependent steps before the copy.
__device__ __forceinline__ void share(int64_t total, uint32_t part, uint32_t parts, int64_t* lo,
                                      int64_t* hi) {
  if ((parts & (parts - 1)) == 0) {
    const int shift = __ffs(static_cast<int>(parts)) - 1;
    *lo = (total * part) >> shift;
    *hi = (total * (part + 1)) >> shift;
    return;
  }
  *lo = total * part / parts;
  *hi = total * (part + 1) / parts;
}

// This rank's own split table: written before the kernel started, in stream order.
__device__ __forceinline__ int64_t load_i64(const char* p) {
  return *reinterpret_cast<const int64_t*>(p);
}

}  // namespace symmwin_ops
