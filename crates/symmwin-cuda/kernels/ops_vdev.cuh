// The all_to_all_vdev family (1-D, MoE dispatch = 2-D, MoE combine = 2-D offset) in one
// launch: planning and data together. Part of the ops module (ops.cu).
//
// CUDA promises neither the order in which blocks start nor that they are resident
// together, so no block ever waits for another block of its own grid: every block
// plans the whole op itself, from the split tables of every rank, and then copies its
// own share of its source's rows. Blocks wait only for peers (other ranks), as every
// ops kernel does, and every such wait is a timed wait through wait.cuh that names the
// peer when it times out or the peer's process ends.
//
// Who plans in a block (ops_team.cuh): warp 0 alone when every table has 32 entries or
// fewer (world * experts <= 32: the 1-D op up to world 32, MoE at small worlds), with
// warp shuffles and no block barrier until the plan is done; else the whole block.
//
// Grid: world * blocks_per_peer. Block b serves source s = (rank + 1 + b / bpp) % world
// with share b % bpp of the rows s sends this rank (the pull of ops_collectives.cuh).
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
//
// Signals (each wait on its own channel, so a report's channel says which wait it was):
//   ready  = channel:          "my input and split table are final" (sent by this rank's
//                              block (t, 0) to peer t after checking its own table). It
//                              is looked at, not taken, by every block of the receiver
//                              (acquire loads); the receiver's last block to finish its
//                              table reads clears it. Slot (ready, rank) of the own pad,
//                              which no peer writes, counts the blocks that finished.
//   tables = channel + 1:      "every block of mine has read your split table", sent by
//                              that last block to every peer; block (t, 0) waits for it.
//   done   = channel + 2 + part: "block part has read your input" (as in the two-kernel
//                              pull); block (t, part) sends and waits for it.
// Nothing on a peer is written: a rank writes only its own `out`, `out_splits_offsets`
// and pad, and its tables and input stay untouched until every peer said it is done
// reading them (tables, done). Pads are zero again when the kernel ends.
#pragma once

#include "ops_device.cuh"
#include "ops_team.cuh"

namespace symmwin_ops {

// The plan of the op, in out_splits_offsets order: rows received, where they land.
__shared__ int64_t vdev_splits[SYMMWIN_OPS_MAX_SPLITS];
__shared__ int64_t vdev_offsets[SYMMWIN_OPS_MAX_SPLITS];
// 2-D: each expert's aligned length, then how far its rows move for the alignment.
__shared__ int64_t vdev_major[SYMMWIN_OPS_MAX_EXPERTS];
// This block's source, segment e (its rows for expert e): how many of the source's
// rows to this rank come before it, and where it starts in the source's input.
__shared__ int64_t vdev_seg_first[SYMMWIN_OPS_MAX_EXPERTS];
__shared__ int64_t vdev_seg_src[SYMMWIN_OPS_MAX_EXPERTS];
__shared__ uint32_t vdev_last_block;
// The rows this block's source sends this rank, from warp 0's plan (plan_in_team).
__shared__ int64_t vdev_rows_of_source;

// A load of a split table that may belong to a peer: ordered after the ready signal
// this thread's block saw, and never served from a stale cache line.
__device__ __forceinline__ int64_t load_acquire_i64(const char* p) {
  int64_t v;
  asm volatile("ld.acquire.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// An entry of `owner`'s split table. A peer's is an acquire load (above); this rank's
// own was written before the kernel started, in stream order, so a plain load, which
// need not wait for the acquire loads before it, reads it.
__device__ __forceinline__ int64_t load_table_i64(const OpsParams& p, uint32_t owner,
                                                  const char* at) {
  return owner == p.rank ? load_i64(at) : load_acquire_i64(at);
}

__device__ __forceinline__ uint32_t load_acquire_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Index in out_splits_offsets of the rows source `s` sends this rank for segment e.
__device__ __forceinline__ uint32_t recv_index(const OpsParams& p, uint32_t s, uint32_t e) {
  return p.mode == SYMMWIN_A2AV_2D ? e * p.world + s : s * p.experts + e;
}

// Source and expert of entry i of out_splits_offsets (the inverse of recv_index).
__device__ __forceinline__ uint32_t source_of(const OpsParams& p, uint32_t i) {
  return p.mode == SYMMWIN_A2AV_2D ? i % p.world : i / p.experts;
}
__device__ __forceinline__ uint32_t expert_of(const OpsParams& p, uint32_t i) {
  return p.mode == SYMMWIN_A2AV_2D ? i / p.world : i % p.experts;
}

// Whether `rows` rows fit in an operand of `bytes` bytes: rows <= bytes / row_bytes,
// tested with a multiplication because the division is a 64-bit one, a call of some
// seventy instructions in the plan's chain of dependent steps.
__device__ __forceinline__ bool rows_fit(uint64_t rows, uint64_t row_bytes, uint64_t bytes) {
  return __umul64hi(rows, row_bytes) == 0 && rows * row_bytes <= bytes;
}

// The rows an operand holds (this rank's input or output), for the failure paths'
// messages.
__device__ __forceinline__ int64_t rows_in(const Operand& o, const OpsParams& p) {
  return static_cast<int64_t>(o.bytes / p.row_bytes);
}

// Entry i of this rank's own table: its rows. A split must be non-negative and inside
// the input (with its offset, for the 2-D offset layout); the first entry that is not
// goes to `bad`, and the caller fails it after its loop (fail_own_split), so the loop
// holds no call and its warp leaves it together.
__device__ __forceinline__ int64_t own_split(const OpsParams& p, const char* own, uint32_t i,
                                             uint32_t* bad) {
  const int64_t rows = load_i64(own + i * sizeof(int64_t));
  int64_t off = 0;
  if (p.mode == SYMMWIN_A2AV_2D_OFFSET) {
    off = load_i64(own + (p.world * p.experts + i) * sizeof(int64_t));
  }
  if (rows < 0 || off < 0 ||
      !rows_fit(static_cast<uint64_t>(off) + static_cast<uint64_t>(rows), p.row_bytes, p.src.bytes)) {
    *bad = min(*bad, i);
  }
  return rows;
}

// Traps naming entry i of this rank's own table, which own_split found does not fit.
__device__ __noinline__ void fail_own_split(const OpsParams& p, const char* own, uint32_t i) {
  const int64_t in_rows = rows_in(p.src, p);
  const int64_t rows = load_i64(own + i * sizeof(int64_t));
  if (p.mode == SYMMWIN_A2AV_2D_OFFSET) {
    const int64_t off = load_i64(own + (p.world * p.experts + i) * sizeof(int64_t));
    fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i % p.world, rows, off + rows, in_rows);
  } else {
    fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i / p.experts, rows, rows, in_rows);
  }
}

// Consecutive splits summing to more than the input (`sent` > in_rows, 1-D and 2-D):
// walks the table to name the first split that reaches past it, and traps.
__device__ __noinline__ void fail_sent_total(const OpsParams& p, const char* own) {
  const int64_t in_rows = rows_in(p.src, p);
  int64_t end = 0;
  for (uint32_t i = 0; i < p.world * p.experts; ++i) {
    const int64_t rows = load_i64(own + i * sizeof(int64_t));
    if (rows > in_rows - end) {
      fail_split(p, SYMMWIN_OPS_ERR_BAD_SPLIT, i / p.experts, rows, end + rows, in_rows);
    }
    end += rows;
  }
}

// After every thread read its share of this rank's own table (`bad` from own_split,
// `sent` summed over the block): a split that does not fit traps here, in thread 0,
// naming the first entry that does not fit (a sum past the input only when every
// entry fits alone). Called by every thread.
template <typename Team>
__device__ __forceinline__ void fail_if_own_table_bad(const OpsParams& p, const char* own,
                                                      uint32_t bad, int64_t sent) {
  bad = Team::first_bad_entry(bad);
  if (threadIdx.x != 0) {
    return;
  }
  if (bad != kNoEntry) {
    fail_own_split(p, own, bad);
  }
  // Every entry fits alone here, so `sent` is a sum of non-negative splits.
  if (p.mode != SYMMWIN_A2AV_2D_OFFSET &&
      !rows_fit(static_cast<uint64_t>(sent), p.row_bytes, p.src.bytes)) {
    fail_sent_total(p, own);
  }
}

// Every split this rank sends fits its own input; a split that does not traps here,
// before a peer is told it may read (or, in a block serving this rank, before a byte
// of our own rows moves). Called by every thread; synchronises.
template <typename Team>
__device__ void check_own_table(const OpsParams& p) {
  const char* own = operand_at(p.src_splits, p.rank);
  int64_t sent = 0, unused = 0;
  uint32_t bad = kNoEntry;
  for_each_owned<Team>(p.world * p.experts,
                       [&](uint32_t i) { sent += own_split(p, own, i, &bad); });
  Team::sum2(&sent, &unused);
  fail_if_own_table_bad<Team>(p, own, bad, sent);
  Team::sync();  // a thread that traps never gets here, so no signal follows it
}

// Waits until every peer's ready signal is in this rank's pad, without taking it
// (acquire loads; the op's last block clears them, see release_tables). A signal with
// another operand fingerprint fails naming the peer; one report names every late peer.
// Called by every thread; synchronises.
template <typename Team>
__device__ void observe_peers(const OpsParams& p, uint32_t channel) {
  if (threadIdx.x == 0) {
    block_timeouts.init(p.world - 1);
  }
  Team::sync();
  if (is_peer_thread(p)) {
    const uint32_t t = threadIdx.x;
    const uint32_t* slot = pad_slot(p, p.rank, channel, t);
    uint32_t seen = 0;
    const uint64_t waited = symmwin::spin_for_peer(
        [slot, &seen] {
          seen = load_acquire_u32(slot);
          return seen != 0u;
        },
        p.wait, t, channel);
    if (waited == 0 && seen != p.fingerprint) {
      fail_mismatch(p, t, seen);
    }
    block_timeouts.finish(p.wait, channel, t, waited);
  }
  Team::sync();
}

// Reads what the block plans from: the rows every source sends this rank (into
// vdev_splits), and for source `s`: the sum of the splits its table lists before ours
// (1-D, 2-D: where its rows to us start in its input; returned) or each segment's
// explicit input offset (2-D offset: vdev_seg_src). Every read of a peer's table is
// an acquire load after that peer's ready signal was seen. A block that copies our
// own rows (`check`) checks our table in the same pass. Called by every thread.
template <typename Team>
__device__ int64_t gather_plan(const OpsParams& p, uint32_t s, bool check) {
  const uint32_t n = p.world * p.experts;
  const bool explicit_offsets = p.mode == SYMMWIN_A2AV_2D_OFFSET;
  const char* theirs = operand_at(p.src_splits, s);
  const char* own = operand_at(p.src_splits, p.rank);
  const uint32_t before = explicit_offsets ? 0u : p.rank * p.experts;
  int64_t sent = 0, base = 0;
  uint32_t bad = kNoEntry;
  for_each_owned<Team>(n, [&](uint32_t i) {
    const uint32_t src = source_of(p, i);
    const uint32_t e = expert_of(p, i);
    uint64_t at;
    switch (p.mode) {
      case SYMMWIN_A2AV_1D: at = p.rank; break;
      case SYMMWIN_A2AV_2D: at = static_cast<uint64_t>(p.rank) * p.experts + e; break;
      default: at = static_cast<uint64_t>(e) * p.world + p.rank; break;
    }
    vdev_splits[i] = load_table_i64(p, src, operand_at(p.src_splits, src) + at * sizeof(int64_t));
    if (check) sent += own_split(p, own, i, &bad);
    if (i < before) base += load_table_i64(p, s, theirs + i * sizeof(int64_t));
  });
  if (explicit_offsets) {
    for_each_owned<Team>(p.experts, [&](uint32_t e) {
      const uint64_t at = n + static_cast<uint64_t>(e) * p.world + p.rank;
      vdev_seg_src[e] = load_table_i64(p, s, theirs + at * sizeof(int64_t));
    });
  }
  Team::sum2(&sent, &base);
  if (check) fail_if_own_table_bad<Team>(p, own, bad, sent);
  return base;
}

// Called by every thread once the block has read every peer table it reads: counts
// the block in slot (channel, rank) of the own pad, and returns true (in every thread)
// in the last block of the grid to get here.
template <typename Team>
__device__ bool last_to_read_tables(const OpsParams& p, uint32_t channel) {
  Team::sync();  // every thread's table reads are done
  if (threadIdx.x == 0) {
    uint32_t* counter = pad_slot(p, p.rank, channel, p.rank);
    uint32_t before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(counter)
                 : "memory");
    vdev_last_block = before + 1 == gridDim.x ? 1u : 0u;
  }
  Team::sync();
  return vdev_last_block != 0u;
}

// In the last block: every block has seen every ready signal and read every table, so
// clear the ready signals and the count (pads are zero at rest) and tell every peer we
// are done with its table. A peer's next ready signal cannot arrive before: it waits
// for a free slot, and the peer sends it only after our `tables` signal.
__device__ void release_tables(const OpsParams& p, uint32_t ready, uint32_t tables) {
  if (is_peer_thread(p)) {
    atomicExch(pad_slot(p, p.rank, ready, threadIdx.x), 0u);
    signal_peer(p, threadIdx.x, tables);
  }
  if (threadIdx.x == 0) {
    atomicExch(pad_slot(p, p.rank, ready, p.rank), 0u);
  }
}

// `rows` rounded up to a multiple of `align` (> 0): a mask for a power of two (every
// alignment MoE layers use), else a 64-bit division.
__device__ __forceinline__ int64_t align_up(int64_t rows, int64_t align) {
  if ((align & (align - 1)) == 0) {
    return (rows + align - 1) & ~(align - 1);
  }
  return (rows + align - 1) / align * align;
}

// The rows an expert takes in the 2-D layout: its `rows` rounded up to `align`, and
// never fewer than `align` (an expert that receives nothing still has its place).
__device__ __forceinline__ int64_t expert_rows(int64_t rows, int64_t align) {
  const int64_t aligned = align_up(rows, align);
  return aligned > align ? aligned : align;
}

// The 2-D offsets (expert-major, each expert's rows aligned) in warp 0, when every
// entry has a lane (world * experts <= 32): lane i keeps entry i in registers, and two
// warp scans and three shuffles place it, where place_splits takes two team scans and
// three passes through shared memory. Expert m = i / world starts after the aligned
// sizes of the experts before it; entry i, that far plus the rows of its expert's
// entries before it. Called by every lane of warp 0.
__device__ void expert_major_offsets_in_warp(const OpsParams& p) {
  const uint32_t n = p.world * p.experts;
  const uint32_t i = threadIdx.x;
  const int64_t split = i < n ? vdev_splits[i] : 0;
  const int64_t incl = warp_inclusive_scan(split);
  const int64_t excl = incl - split;
  // Lanes: first <= i < 32, and last < n <= 32.
  const uint32_t first = i / p.world * p.world;            // the expert's first entry
  const uint32_t last = min(first + p.world, n) - 1;       // its last
  const int64_t start = __shfl_sync(kFullMask, excl, first);
  const int64_t end = __shfl_sync(kFullMask, incl, last);
  const int64_t size = expert_rows(end - start, p.major_align);
  const int64_t lead = i < n && i == first ? size : 0;  // one lane an expert counts it
  const int64_t experts_before = warp_inclusive_scan(lead) - lead;
  const int64_t expert_start = __shfl_sync(kFullMask, experts_before, first);
  if (i < n) {
    vdev_offsets[i] = expert_start + excl - start;
  }
  __syncwarp();
}

// Where every received split lands in `out` (vdev_offsets), by the team. Called by
// every thread; synchronises.
template <typename Team>
__device__ void place_splits(const OpsParams& p) {
  const uint32_t n = p.world * p.experts;
  const int64_t total = team_scan<Team>(vdev_splits, vdev_offsets, n);
  if (p.mode != SYMMWIN_A2AV_2D) {
    return;
  }
  // Expert-major: expert m's sources are entries [m * world, (m + 1) * world).
  const uint32_t minor = p.world;
  const uint32_t major = p.experts;
  for_each_owned<Team>(major, [&](uint32_t m) {
    const int64_t start = vdev_offsets[m * minor];
    const int64_t end = m + 1 < major ? vdev_offsets[(m + 1) * minor] : total;
    vdev_major[m] = expert_rows(end - start, p.major_align);
  });
  Team::sync();
  team_scan<Team>(vdev_major, vdev_major, major);
  for_each_owned<Team>(major, [&](uint32_t m) { vdev_major[m] -= vdev_offsets[m * minor]; });
  Team::sync();
  for_each_owned<Team>(n, [&](uint32_t i) { vdev_offsets[i] += vdev_major[i / minor]; });
  Team::sync();
}

// Where every received split lands in `out` (vdev_offsets); stops before anything is
// copied when one does not fit. Called by every thread; synchronises.
template <typename Team>
__device__ void plan_offsets(const OpsParams& p) {
  const uint32_t n = p.world * p.experts;
  if (Team::kSize == WarpTeam::kSize && p.mode == SYMMWIN_A2AV_2D) {
    expert_major_offsets_in_warp(p);
  } else {
    place_splits<Team>(p);
  }
  // Splits and offsets are non-negative here: every table was checked by its owner.
  uint32_t bad = kNoEntry;
  for_each_owned<Team>(n, [&](uint32_t i) {
    const uint64_t end = static_cast<uint64_t>(vdev_offsets[i]) + static_cast<uint64_t>(vdev_splits[i]);
    if (!rows_fit(end, p.row_bytes, p.dst.bytes)) {
      bad = min(bad, i);
    }
  });
  bad = Team::first_bad_entry(bad);
  if (bad != kNoEntry && threadIdx.x == 0) {
    fail_split(p, SYMMWIN_OPS_ERR_OVERFLOW, source_of(p, bad), vdev_splits[bad],
               vdev_offsets[bad], rows_in(p.dst, p));
  }
}

// out_splits_offsets, from the plan (one block writes it).
template <typename Team>
__device__ void write_out_splits_offsets(const OpsParams& p) {
  const uint32_t n = p.world * p.experts;
  int64_t* out_splits = reinterpret_cast<int64_t*>(operand_at(p.dst_splits, p.rank));
  int64_t* out_offsets = out_splits + n;
  for_each_owned<Team>(n, [&](uint32_t i) {
    out_splits[i] = vdev_splits[i];
    out_offsets[i] = vdev_offsets[i];
  });
}

// The segments source `s` sends this rank (vdev_seg_first, vdev_seg_src), from the
// plan and `base` (gather_plan); returns all their rows. Called by every thread.
template <typename Team>
__device__ int64_t segments_of(const OpsParams& p, uint32_t s, int64_t base) {
  if (p.mode == SYMMWIN_A2AV_2D) {
    // Expert-major: source s's segments lie apart in the plan, so they are summed anew.
    for_each_owned<Team>(p.experts,
                   [&](uint32_t e) { vdev_seg_first[e] = vdev_splits[recv_index(p, s, e)]; });
    Team::sync();
    const int64_t total = team_scan<Team>(vdev_seg_first, vdev_seg_first, p.experts);
    for_each_owned<Team>(p.experts, [&](uint32_t e) { vdev_seg_src[e] = base + vdev_seg_first[e]; });
    Team::sync();
    return total;
  }
  // Rank-major (1-D, 2-D offset): source s's segments are consecutive entries of the
  // plan, landing one after another, so where each starts among its rows is read off
  // vdev_offsets, without another block scan.
  const uint32_t first = s * p.experts;
  const uint32_t last = first + p.experts - 1;
  const int64_t start = vdev_offsets[first];
  for_each_owned<Team>(p.experts, [&](uint32_t e) {
    vdev_seg_first[e] = vdev_offsets[first + e] - start;
    if (p.mode == SYMMWIN_A2AV_1D) {
      vdev_seg_src[e] = base + vdev_seg_first[e];
    }
  });
  Team::sync();
  return vdev_offsets[last] + vdev_splits[last] - start;
}

// Where source `s`'s rows land: entry first + e * step of the plan is its segment e.
struct SourceRows {
  const char* in;    // the source's input
  char* out;         // this rank's output
  uint64_t row_bytes;
  uint32_t experts;  // segments
  uint32_t first;    // recv_index(p, s, 0)
  uint32_t step;     // recv_index(p, s, e + 1) - recv_index(p, s, e)
};

// Copies rows [lo, hi) of a source's `total` rows to this rank, segment by segment.
// Not inlined, so the copy loop gets registers of its own: inlined into the kernel,
// ptxas kept the plan's values live across it and spilled them, and MoE dispatch and
// combine ran 3.4 and 3.8 us slower (bench/fixed_cost.cu, H100). It takes what it
// needs by value: given the kernel's parameters by reference, the out-of-line copy
// read each through memory (a generic load of the parameter space, after the plan's
// acquire loads had emptied the L1), where the kernel reads them from the constant
// cache.
__device__ __noinline__ void copy_source_rows(const SourceRows r, int64_t total, int64_t lo,
                                              int64_t hi) {
  if (lo >= hi) {
    return;
  }
  // The last segment that starts at or before `lo` holds it (empty ones start where
  // the next does).
  uint32_t first = 0, count = r.experts;
  while (count > 1) {
    const uint32_t half = count / 2;
    if (vdev_seg_first[first + half] <= lo) {
      first += half;
      count -= half;
    } else {
      count = half;
    }
  }
  for (uint32_t e = first; e < r.experts && vdev_seg_first[e] < hi; ++e) {
    const int64_t start = vdev_seg_first[e];
    const int64_t end = e + 1 < r.experts ? vdev_seg_first[e + 1] : total;
    const int64_t a = lo > start ? lo : start;
    const int64_t b = hi < end ? hi : end;
    if (a < b) {
      const uint64_t skip = static_cast<uint64_t>(a - start);
      const uint64_t to = static_cast<uint64_t>(vdev_offsets[r.first + e * r.step]) + skip;
      const uint64_t from = static_cast<uint64_t>(vdev_seg_src[e]) + skip;
      copy_part(r.out + to * r.row_bytes, r.in + from * r.row_bytes,
                static_cast<uint64_t>(b - a) * r.row_bytes, 0, 1);
    }
  }
}

// Copies rows [lo, hi) of source `s`'s `total` rows to this rank (copy_source_rows).
__device__ __forceinline__ void copy_rows(const OpsParams& p, uint32_t s, int64_t total,
                                          int64_t lo, int64_t hi) {
  const uint32_t first = recv_index(p, s, 0u);
  const SourceRows rows{operand_at(p.src, s), operand_at(p.dst, p.rank), p.row_bytes,
                        p.experts,            first,                     recv_index(p, s, 1u) - first};
  copy_source_rows(rows, total, lo, hi);
}

// Everything before the copy, run by `Team`: this rank's table checked and announced
// (a block that serves a peer's rows, share 0), every peer's ready signal seen, the
// tables read, the plan made, and source `s`'s segments found. Returns the rows `s`
// sends this rank. Called by every thread of the team.
template <typename Team>
__device__ int64_t plan_the_op(const OpsParams& p, uint32_t s, uint32_t part) {
  const uint32_t ready = p.channel;
  const uint32_t tables = p.channel + 1;
  const bool own_rows = s == p.rank;
  if (!own_rows && part == 0) {
    check_own_table<Team>(p);
    if (threadIdx.x == 0) {
      signal_peer(p, s, ready);
    }
  }
  if (p.world > 1) {
    observe_peers<Team>(p, ready);
  }
  const int64_t base = gather_plan<Team>(p, s, own_rows);
  SYMMWIN_OPS_TRACE_POINT(3);
  if (p.world > 1 && last_to_read_tables<Team>(p, ready)) {
    release_tables(p, ready, tables);
  }
  plan_offsets<Team>(p);
  SYMMWIN_OPS_TRACE_POINT(4);
  if (blockIdx.x == 0) {
    write_out_splits_offsets<Team>(p);
  }
  SYMMWIN_OPS_TRACE_POINT(5);
  const int64_t rows = segments_of<Team>(p, s, base);
  SYMMWIN_OPS_TRACE_POINT(6);
  return rows;
}

// Whether warp 0 alone plans the op: every table has at most 32 entries, so a lane
// reads one entry of each, as a thread of the block would.
__device__ __forceinline__ bool plan_fits_one_warp(const OpsParams& p) {
  return p.world * p.experts <= WarpTeam::kSize;
}

// Runs `plan(team)`, which plans into shared memory and returns the rows this block's
// source sends this rank, in the team that plans the op: warp 0 alone when the plan
// fits one warp, else the whole block. Every thread gets the rows. Called by every
// thread; synchronises.
template <typename Plan>
__device__ int64_t plan_in_team(const OpsParams& p, Plan plan) {
  if (!plan_fits_one_warp(p)) {
    return plan(BlockTeam{});
  }
  if (threadIdx.x < WarpTeam::kSize) {
    const int64_t rows = plan(WarpTeam{});
    if (threadIdx.x == 0) {
      vdev_rows_of_source = rows;
    }
  }
  __syncthreads();  // the warp's plan, in shared memory, is the block's
  return vdev_rows_of_source;
}

// After a block copied its share of peer `s`'s rows: it tells `s` so, and waits until
// `s`'s matching block read ours (and, share 0, until every block of `s` read our
// table), so the kernel ends only when no peer will read our input again. A block that
// copied our own rows has no one to wait for.
__device__ __forceinline__ void finish_with_peer(const OpsParams& p, uint32_t s, uint32_t part) {
  if (s == p.rank) {
    return;
  }
  const uint32_t tables = p.channel + 1;
  const uint32_t done = p.channel + 2 + part;
  block_signal(p, s, done);
  if (threadIdx.x == 0) {
    wait_peer(p, s, done);
    if (part == 0) {
      wait_peer(p, s, tables);
    }
  }
}

}  // namespace symmwin_ops

// The whole op in one launch: see the top of this file.
// Channels: [channel, channel + 2 + blocks_per_peer).
// ptxas gives it 112 registers a thread, so one 512-thread block an SM: grid.rs's 128
// blocks are all resident on a 132-SM H100 or H200. Holding it to two blocks an SM
// (__launch_bounds__(kThreads, 2), 64 registers) made every grid slower, 4 KiB 4.1 ->
// 4.9 us and MoE dispatch 24 -> 30 (bench/results/2026-12-07-one-h100-launch-bound.md).
// On a part with fewer SMs (114 on an H100 PCIe) the grid still finishes where blocks
// start in index order, as they do in practice (CUDA does not promise it): a block
// waits for peer blocks that serve this rank (ready, done), and the stagger puts those
// first, blocks [0, (world - 1) * bpp), 112 at world 8 (grid.rs). The blocks of our
// own rows come last: they wait only for ready signals, which peers send before any
// wait of theirs, and a share-0 block's wait for `tables` ends after them, once blocks
// that finished freed SMs for them.
extern "C" __global__ void __launch_bounds__(kThreads)
    symmwin_ops_a2av(const __grid_constant__ OpsParams p) {
  SYMMWIN_OPS_TRACE_POINT(0);
  const uint32_t bpp = p.blocks_per_peer;
  uint32_t s, part;
  peer_and_share(p, &s, &part);
  SYMMWIN_OPS_TRACE_POINT(2);
  const int64_t total =
      plan_in_team(p, [&](auto team) { return plan_the_op<decltype(team)>(p, s, part); });
  SYMMWIN_OPS_TRACE_POINT(7);
  int64_t lo, hi;
  share(total, part, bpp, &lo, &hi);
  copy_rows(p, s, total, lo, hi);
  SYMMWIN_OPS_TRACE_POINT(8);
  finish_with_peer(p, s, part);
  SYMMWIN_OPS_TRACE_POINT(9);
}
