// Device operations over symmwin windows: the all-to-all family, broadcast, put/get,
// value signals and tile reduce, with torch 2.11's NVSHMEM semantics.
//
// Addressing: every operand is a flat window plus a byte offset, so rank r's copy of
// it sits at `base + r * stride + offset` (struct Operand). Kernels take one
// by-value `OpsParams`; its layout is shared with `provider/cuda/ops/params.rs` and
// checked on both sides (static_asserts here, a unit test there). It is declared
// `__grid_constant__` because the helpers take it by reference: without that, every
// thread copies all 288 bytes into local memory before its first instruction of work
// (150 KB per 512-thread block, more than a small op moves; build_ptx.sh fails on it).
//
// Synchronisation uses the signal pads with torch's protocol: the slot for
// (channel, src) in the receiver's pad is `channel * world + src` (uint32); put is a
// system-scope CAS 0 -> v with release, wait a CAS v -> 0 with acquire; pads are zero
// at rest because every put of an op is consumed by a wait of the same op. The value
// v is not torch's constant 1 but the op's operand fingerprint (OpsParams::fingerprint,
// the same on every rank that passes the same dtype, shape, root and engine): a wait
// that finds another value fails naming the peer (SYMMWIN_OPS_ERR_MISMATCH), so ranks
// that disagree never move reinterpreted bytes, in CUDA graph replays too.
//
// Every op that writes into a peer's memory first receives that peer's "ready"
// signal (the peer's stream has reached the op, so nothing of it still reads the
// memory we are about to write), and every op that reads a peer's memory tells the
// peer when it is done (so the peer does not overwrite it early). Both are fused into
// the data kernels: one signal per (peer, block) instead of separate barriers.
//
// Failures are loud. Every wait goes through wait.cuh: past the limit in
// `OpsParams::wait` it records the op, channel and late peers in the provider's
// timeout record, prints one line and traps. Splits that do not fit (received rows
// past `out`, sent rows past the input, negative splits) are checked before a byte
// moves; they record the peer, the rows and the room in `OpsParams::err` (struct
// OpsError), print one line and trap the same way. The trap makes the stream's next
// synchronisation raise, as torch's backends do; the host-mapped records survive the
// lost context, and the next symmwin call names what happened.
//
// Build: kernels/build_ptx.sh (nvcc -ptx -arch=compute_90 -O3). The PTX is committed
// and loaded with cuModuleLoadData, so installing needs no CUDA toolkit.

#include <stddef.h>
#include <stdint.h>

#include "ops_params.cuh"  // includes wait.cuh
#include "pads.cuh"

namespace symmwin_ops {

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

// The line printed before a trap can be lost when the trap comes at once; give it
// (and the record) the same time wait.cuh gives its own.
__device__ __noinline__ void trap_after_print() {
  __threadfence_system();
  const uint64_t flushed = symmwin::global_timer_ns() + symmwin::kTrapDelayNs;
  while (symmwin::global_timer_ns() < flushed) {
    __nanosleep(1000);
  }
  __trap();
}

// First writer wins; the fields are written before the word, so the host never sees
// a word without its details.
__device__ void record_split_failure(const OpsParams& p, uint32_t kind, uint32_t peer,
                                     int64_t rows, int64_t room) {
  OpsError* e = reinterpret_cast<OpsError*>(p.err);
  volatile uint32_t* word = &e->word;
  if (*word == 0) {
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

// Rows that do not fit `out`: nothing has been copied; stop here.
__device__ __noinline__ void fail_overflow(const OpsParams& p, uint32_t peer, int64_t rows,
                                           int64_t offset, int64_t room) {
  record_split_failure(p, SYMMWIN_OPS_ERR_OVERFLOW, peer, rows, room);
  printf("symmwin: device %s on rank %u: %lld rows from rank %u at row %lld do not fit out "
         "(room for %lld rows); nothing was copied; trapping, the CUDA context is lost and "
         "the process must exit\n",
         symmwin::op_name(p.wait.op), p.rank, static_cast<long long>(rows), peer,
         static_cast<long long>(offset), static_cast<long long>(room));
  trap_after_print();
}

// A split or offset this rank sends that is negative or reaches past its own input.
__device__ __noinline__ void fail_bad_split(const OpsParams& p, uint32_t peer, int64_t rows,
                                            int64_t end, int64_t room) {
  record_split_failure(p, SYMMWIN_OPS_ERR_BAD_SPLIT, peer, rows, room);
  printf("symmwin: device %s on rank %u: a split of %lld rows for rank %u ends at row %lld, "
         "outside the input (%lld rows) or negative; nothing was sent; trapping, the CUDA "
         "context is lost and the process must exit\n",
         symmwin::op_name(p.wait.op), p.rank, static_cast<long long>(rows), peer,
         static_cast<long long>(end), static_cast<long long>(room));
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

// One thread waits for `src`'s signal on `channel`; its later reads are ordered after it.
__device__ __forceinline__ void wait_peer(const OpsParams& p, uint32_t src, uint32_t channel) {
  uint32_t seen;
  const uint64_t waited =
      timed_take_fingerprint(p, pad_slot(p, p.rank, channel, src), src, channel, &seen);
  if (waited != 0) {
    const uint32_t late[1] = {src};
    symmwin::report_and_trap(p.wait, channel, late, 1, 1, waited, 0);
  }
  if (seen != p.fingerprint) {
    fail_mismatch(p, src, seen);
  }
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

// Part `part` of `parts` (each a block) copies its share of `n` bytes: 16-byte loads
// and stores, kUnroll in flight per thread, when both ends are 16-byte aligned; bytes
// otherwise (odd row sizes).
__device__ void copy_part(char* dst, const char* src, uint64_t n, uint32_t part, uint32_t parts) {
  if (n == 0) {
    return;
  }
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) != 0) {
    for (uint64_t i = static_cast<uint64_t>(part) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<uint64_t>(parts) * blockDim.x) {
      dst[i] = src[i];
    }
    return;
  }
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  const uint64_t nvec = n >> 4;
  const uint64_t tile = static_cast<uint64_t>(blockDim.x) * kUnroll;
  const uint64_t full = nvec / tile;
  for (uint64_t t = part; t < full; t += parts) {
    const uint64_t i0 = t * tile + threadIdx.x;
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = ld_v4(s4 + i0 + static_cast<uint64_t>(u) * blockDim.x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) st_v4(d4 + i0 + static_cast<uint64_t>(u) * blockDim.x, v[u]);
  }
  // The vectors past the last whole tile and the last < 16 bytes go to one part.
  if (part == full % parts) {
    for (uint64_t i = full * tile + threadIdx.x; i < nvec; i += blockDim.x) {
      st_v4(d4 + i, ld_v4(s4 + i));
    }
    for (uint64_t i = (nvec << 4) + threadIdx.x; i < n; i += blockDim.x) {
      dst[i] = src[i];
    }
  }
}

// Rows [lo, hi) of `parts` equal shares of `total` rows, for share `part`.
__device__ __forceinline__ void share(int64_t total, uint32_t part, uint32_t parts, int64_t* lo,
                                      int64_t* hi) {
  *lo = total * part / parts;
  *hi = total * (part + 1) / parts;
}

__device__ __forceinline__ int64_t load_i64(const char* p) {
  return *reinterpret_cast<const volatile int64_t*>(p);
}

}  // namespace symmwin_ops

// A named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with
// a hash of the source path, so the committed PTX would differ between checkouts.
using namespace symmwin_ops;

// =================================================================================
// all_to_all (equal splits), SM engine: push with fused signals.
//
// Grid: world * blocks_per_peer blocks; block b serves peer (rank + 1 + b / bpp) % world
// (staggered so ranks start on different peers) with share b % bpp of the chunk.
// A remote block waits for the peer's ready signal, pushes its share of chunk `peer`
// into slot `rank` of the peer's `out`, and signals the peer; then it waits for the
// peer's matching block, so on return every chunk sent to this rank has arrived.
// Channels: [channel, channel + bpp) ready, [channel + bpp, channel + 2 bpp) data.
extern "C" __global__ void __launch_bounds__(kThreads)
    symmwin_ops_all_to_all(const __grid_constant__ OpsParams p) {
  const uint32_t bpp = p.blocks_per_peer;
  const uint32_t peer = (p.rank + 1 + blockIdx.x / bpp) % p.world;
  const uint32_t part = blockIdx.x % bpp;
  const char* src = operand_at(p.src, p.rank) + static_cast<uint64_t>(peer) * p.bytes;
  char* dst = operand_at(p.dst, peer) + static_cast<uint64_t>(p.rank) * p.bytes;
  if (peer == p.rank) {
    copy_part(dst, src, p.bytes, part, bpp);
    return;
  }
  const uint32_t ready = p.channel + part;
  const uint32_t data = p.channel + bpp + part;
  // Tell the peer our `out` is free, and wait until its `out` is.
  if (threadIdx.x == 0) {
    signal_peer(p, peer, ready);
    wait_peer(p, peer, ready);
  }
  __syncthreads();
  copy_part(dst, src, p.bytes, part, bpp);
  block_signal(p, peer, data);
  if (threadIdx.x == 0) {
    wait_peer(p, peer, data);
  }
}

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

// Received-split index in out_splits_offsets of (source s, segment e).
__device__ __forceinline__ uint32_t recv_index(const OpsParams& p, uint32_t s, uint32_t e) {
  return p.mode == SYMMWIN_A2AV_2D ? e * p.world + s : s * p.experts + e;
}

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
        fail_bad_split(p, i % p.world, rows, off + rows, in_rows);
      }
    } else if (rows < 0 || rows > in_rows) {
      fail_bad_split(p, i / p.experts, rows, rows, in_rows);
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
        fail_bad_split(p, i / p.experts, rows, end + rows, in_rows);
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
    symmwin_ops_a2av_plan(const __grid_constant__ OpsParams p) {
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
        fail_overflow(p, src, rows, off, room);
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
    symmwin_ops_a2av_data(const __grid_constant__ OpsParams p) {
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

// =================================================================================
// broadcast, SM engine: every rank pulls the root's `bytes` into its own copy.
// Grid: blocks_per_peer. Channels: [channel, +bpp) ready, [channel + bpp, +bpp) done.
extern "C" __global__ void __launch_bounds__(kThreads)
    symmwin_ops_broadcast(const __grid_constant__ OpsParams p) {
  const uint32_t part = blockIdx.x;
  const uint32_t bpp = p.blocks_per_peer;
  const uint32_t root = p.peer;
  const uint32_t ready = p.channel + part;
  const uint32_t done = p.channel + bpp + part;
  if (p.rank == root) {
    peer_handshake(p, ready, done, is_peer_thread(p), is_peer_thread(p));
    return;
  }
  block_wait(p, root, ready);
  copy_part(operand_at(p.dst, p.rank), operand_at(p.src, root), p.bytes, part, bpp);
  block_signal(p, root, done);
}

// =================================================================================
// put / get, SM engine: a plain copy of `bytes` between this rank's copy and `peer`'s
// (put: ours -> theirs; get: theirs -> ours). No signal, as in NVSHMEM's putmem /
// getmem on a stream: the data is in place when the stream passes the kernel.
// Grid: blocks_per_peer.
extern "C" __global__ void __launch_bounds__(kThreads)
    symmwin_ops_copy(const __grid_constant__ OpsParams p) {
  const bool get = p.mode == SYMMWIN_COPY_GET;
  char* dst = operand_at(p.dst, get ? p.rank : p.peer);
  const char* src = operand_at(p.src, get ? p.peer : p.rank);
  copy_part(dst, src, p.bytes, blockIdx.x, gridDim.x);
}

// NVSHMEM_SIGNAL_SET of a 64-bit `value` at `peer`'s copy of dst_splits (the signal
// word), after every earlier write of the stream (the data copy) has reached
// the peer. One thread.
extern "C" __global__ void symmwin_ops_set_value(const __grid_constant__ OpsParams p) {
  if (threadIdx.x != 0) {
    return;
  }
  uint64_t* word = reinterpret_cast<uint64_t*>(operand_at(p.dst_splits, p.peer));
  __threadfence_system();
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(word), "l"(p.value) : "memory");
}

// Wait until this rank's copy of the 64-bit word at dst_splits holds `value` (acquire),
// then reset it to zero in the same atomic step, so the word is zero at rest and the
// same value can be sent again. A local wait on any word of ours (torch passes a view
// of a signal pad); one thread; `peer` is named in a timeout, and its exit mark (when
// the host passes the marks) ends the wait.
extern "C" __global__ void symmwin_ops_wait_value(const __grid_constant__ OpsParams p) {
  if (threadIdx.x != 0) {
    return;
  }
  uint64_t* word = reinterpret_cast<uint64_t*>(operand_at(p.dst_splits, p.rank));
  const uint64_t value = p.value;
  const uint64_t waited = symmwin::spin_for_peer(
      [word, value] {
        uint64_t old;
        asm volatile("atom.acquire.sys.global.cas.b64 %0, [%1], %2, %3;"
                     : "=l"(old)
                     : "l"(word), "l"(value), "l"(0ull)
                     : "memory");
        return old == value;
      },
      p.wait, p.peer, 0);
  if (waited != 0) {
    const uint32_t late[1] = {p.peer};
    symmwin::report_and_trap(p.wait, 0, late, 1, 1, waited, 0);
  }
}

// Handshakes around copy-engine transfers, on `channel`:
//   SYMMWIN_HS_SIGNAL_*: signal `peer` or every other rank (after a system fence, so
//     copies that ran before on the stream are visible first);
//   SYMMWIN_HS_WAIT_*: then wait for `peer` or every other rank.
// One block of at least `world` threads.
extern "C" __global__ void symmwin_ops_handshake(const __grid_constant__ OpsParams p) {
  const uint32_t t = threadIdx.x;
  const bool peer = is_peer_thread(p);
  const bool signal = peer && ((p.mode & SYMMWIN_HS_SIGNAL_ALL) != 0 ||
                               ((p.mode & SYMMWIN_HS_SIGNAL_PEER) != 0 && t == p.peer));
  const bool wait = peer && ((p.mode & SYMMWIN_HS_WAIT_ALL) != 0 ||
                             ((p.mode & SYMMWIN_HS_WAIT_PEER) != 0 && t == p.peer));
  if (signal) {
    __threadfence_system();
  }
  peer_handshake(p, p.channel, p.channel, signal, wait);
}

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
