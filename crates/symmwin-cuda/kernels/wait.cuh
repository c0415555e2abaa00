// Timed device-side waits for symmwin kernels, and what happens when one times out.
//
// Every kernel that waits for a peer (the signal kernels in signal.cu, the device ops)
// waits through this header, so a timeout looks the same everywhere:
//   1. the kernel writes a TimeoutRecord into host-mapped pinned memory (op, channel,
//      this rank, the peer(s) waited for, how long), which outlives the CUDA context;
//   2. it prints one line naming the same facts (device printf: it reaches the
//      process's stdout when the host next synchronizes);
//   3. it executes __trap(). The trap is the point: it makes the stream's next
//      synchronization fail (torch raises torch.AcceleratorError, "unspecified launch
//      failure"), which is torch's SymmetricMemory contract and what its negative tests
//      expect. The context is lost afterwards; the host side (signals.rs,
//      timeout_record.rs) turns the record into a symmwin error at the next symmwin
//      call, saying the process must exit.
// A wait that returns quietly would let a program go on as if every peer had arrived.
//
// Interface, for a kernel file that includes this header:
//   - take a `symmwin::WaitReport` by value as a kernel argument (the host builds it
//     with `CudaSignals::wait_report` in signals.rs: record address, timeout, rank,
//     op id);
//   - wait with `put_or_trap` / `wait_or_trap` (one thread, one peer), or, when several
//     threads of a block wait for different peers (a barrier), with `timed_put` /
//     `timed_wait` and a shared `BlockTimeouts` so one report names every late peer;
//   - `spin_for_peer` turns any try-once predicate into a timed wait for one peer,
//     which also ends, reported like a timeout, when the host marks that peer's process
//     as ended (WaitReport::exits).
// Add a new operation's id to `WaitOp` and `op_name` below and to `WaitOp` in
// crates/symmwin-cuda/src/timeout_record.rs (same numbers).
//
// The header depends on nothing outside the module but device printf (vprintf), which
// the driver's JIT resolves when the PTX is loaded with cuModuleLoadData.

#pragma once

#include <stdint.h>

namespace symmwin {

// Which operation waited. Numbers are shared with timeout_record.rs.
enum WaitOp : uint32_t {
  kOpBarrier = 1,
  kOpPutSignal = 2,
  kOpWaitSignal = 3,
  // The device ops of ops.cu (SYMMWIN_OP_* in ops_params.cuh).
  kOpAllToAll = 4,
  kOpAllToAllVdev = 5,
  kOpAllToAllVdev2d = 6,
  kOpAllToAllVdev2dOffset = 7,
  kOpBroadcast = 8,
  kOpWaitForSignal = 9,
  kOpTileReduce = 10,
  kOpMultiRootTileReduce = 11,
  kOpPut = 12,
  kOpGet = 13,
  kOpPutWithSignal = 14,
};

__device__ __forceinline__ const char* op_name(uint32_t op) {
  switch (op) {
    case kOpBarrier:
      return "barrier";
    case kOpPutSignal:
      return "put_signal";
    case kOpWaitSignal:
      return "wait_signal";
    case kOpAllToAll:
      return "all_to_all";
    case kOpAllToAllVdev:
      return "all_to_all_vdev";
    case kOpAllToAllVdev2d:
      return "all_to_all_vdev_2d";
    case kOpAllToAllVdev2dOffset:
      return "all_to_all_vdev_2d_offset";
    case kOpBroadcast:
      return "broadcast";
    case kOpWaitForSignal:
      return "wait_for_signal";
    case kOpTileReduce:
      return "tile_reduce";
    case kOpMultiRootTileReduce:
      return "multi_root_tile_reduce";
    case kOpPut:
      return "put";
    case kOpGet:
      return "get";
    case kOpPutWithSignal:
      return "put_with_signal";
    default:
      return "device op";
  }
}

// Peers listed in a record; a report with more late peers lists the first ones and
// counts them all.
constexpr uint32_t kRecordPeers = 16;

// How long a reporting thread waits between its printf and the trap.
constexpr uint64_t kTrapDelayNs = 1000000;

// `TimeoutRecord::state` once every other field is written ("SYMW").
constexpr uint32_t kRecordComplete = 0x53594d57u;

// The host-mapped record; layout mirrored by `TimeoutRecord` in timeout_record.rs.
// Written once per process at most: after the trap that follows, the context is lost.
struct TimeoutRecord {
  uint32_t state;       // 0, or kRecordComplete (written last)
  uint32_t op;          // WaitOp
  uint32_t channel;     // signal channel of the wait
  uint32_t rank;        // this rank
  uint32_t missing;     // how many peers did not answer in time
  uint32_t listed;      // how many of them `peers` holds (<= kRecordPeers)
  uint64_t waited_ns;   // how long the longest late wait lasted
  uint64_t timeout_ns;  // the limit it was given
  uint32_t peers[kRecordPeers];
  uint32_t exited_pid;  // 0 for a timeout; else the wait ended because peers[0], this
                        // process, ended (its exit mark, see WaitReport::exits)
  uint32_t _reserved;
};
static_assert(sizeof(TimeoutRecord) == 112, "layout shared with timeout_record.rs");

// Kernel argument: where and how to report. Layout mirrored by `WaitReport` in
// timeout_record.rs; passed by value.
struct WaitReport {
  uint64_t record;      // device address of the host-mapped TimeoutRecord
  uint64_t timeout_ns;  // limit of each wait of this launch (> 0; u64 max: no limit)
  uint32_t rank;        // this rank in the group
  uint32_t op;          // WaitOp of the launching operation
  uint64_t exits;       // device address of the host-mapped exit marks of the group's
                        // ranks (u32 each: 0 while alive or unwatched, else its pid,
                        // written by the host's peer watcher), or 0: none
};
static_assert(sizeof(WaitReport) == 32, "layout shared with timeout_record.rs");

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The host may pass a saturated timeout (u64 max): never let the deadline wrap.
__device__ __forceinline__ uint64_t deadline_from(uint64_t start, uint64_t timeout_ns) {
  return timeout_ns > ~0ull - start ? ~0ull : start + timeout_ns;
}

// Polls between two looks at a peer's exit mark: a look reads host memory over PCIe
// (about a microsecond), a poll a pad word, so one look per this many polls costs the
// wait nothing measurable and still sees a mark within a millisecond.
constexpr uint32_t kPollsPerExitLook = 1024;

__device__ __noinline__ void report_and_trap(WaitReport report, uint32_t channel,
                                             const uint32_t* peers, uint32_t listed,
                                             uint32_t missing, uint64_t waited_ns,
                                             uint32_t exited_pid);

// Calls `try_once()` until it returns true or `report.timeout_ns` has passed, a wait
// for `peer` that also ends when the host marks `peer`'s process as ended
// (`report.exits`): then it reports and traps as a timeout does, naming the peer and its
// pid. The condition is always tried before the mark is looked at, so a
// peer that did its part and then ended never fails a wait it already satisfied; the
// first look comes only after kPollsPerExitLook polls, so a wait that succeeds at once
// never reads the mark.
// Returns 0 on success, else the time waited (always > timeout_ns > 0).
template <typename TryOnce>
__device__ __forceinline__ uint64_t spin_for_peer(TryOnce try_once, const WaitReport& report,
                                                  uint32_t peer, uint32_t channel) {
  const uint64_t start = global_timer_ns();
  const uint64_t timeout_ns = report.timeout_ns;
  const uint64_t deadline = deadline_from(start, timeout_ns);
  const volatile uint32_t* exits = reinterpret_cast<const volatile uint32_t*>(report.exits);
  for (uint32_t polls = 1; !try_once(); ++polls) {
    const uint64_t now = global_timer_ns();
    if (now > deadline) {
      return now - deadline + timeout_ns;
    }
    if (polls % kPollsPerExitLook == 0 && exits != nullptr) {
      const uint32_t pid = exits[peer];
      if (pid != 0u) {
        const uint32_t late[1] = {peer};
        report_and_trap(report, channel, late, 1, 1, now - start, pid);
      }
    }
  }
  return 0;
}

// System-scope CAS with release (put) or acquire (wait) semantics, as torch's kernels
// do through cuda::atomic_ref: a release CAS orders this thread's earlier writes before
// the signal without the full sequentially-consistent fence of __threadfence_system().
__device__ __forceinline__ uint32_t cas_release(uint32_t* slot, uint32_t expected,
                                                uint32_t desired) {
  uint32_t old;
  asm volatile("atom.release.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(slot), "r"(expected), "r"(desired)
               : "memory");
  return old;
}

__device__ __forceinline__ uint32_t cas_acquire(uint32_t* slot, uint32_t expected,
                                                uint32_t desired) {
  uint32_t old;
  asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(slot), "r"(expected), "r"(desired)
               : "memory");
  return old;
}

// Signal a peer through its pad slot (torch's protocol: CAS 0 -> 1, release).
// Everything this thread wrote before is visible to the peer before it can observe the
// signal. The slot may still hold 1 when the peer has not consumed the previous signal
// yet; wait for it instead of losing a signal.
// Returns 0 on success, else the time waited; traps if `peer` ends first.
__device__ __forceinline__ uint64_t timed_put(const WaitReport& report, uint32_t* slot,
                                              uint32_t peer, uint32_t channel) {
  return spin_for_peer([slot] { return cas_release(slot, 0u, 1u) == 0u; }, report, peer,
                       channel);
}

// Consume a peer's signal from this rank's pad slot (CAS 1 -> 0, acquire): every later
// read of this thread is ordered after the signal.
// Returns 0 on success, else the time waited; traps if `peer` ends first.
__device__ __forceinline__ uint64_t timed_wait(const WaitReport& report, uint32_t* slot,
                                               uint32_t peer, uint32_t channel) {
  return spin_for_peer([slot] { return cas_acquire(slot, 1u, 0u) == 1u; }, report, peer,
                       channel);
}

namespace detail {

// First reporter of this module wins; device memory, zero at module load, never reset
// (after the trap the context is gone). External linkage on purpose: nvcc names
// internal symbols with a per-compilation hash, which would make the PTX differ from
// build to build. Each kernel file is its own module, so there is one per module.
__device__ uint32_t g_report_claimed;

__device__ __forceinline__ char* append_text(char* out, const char* end, const char* s) {
  while (*s != '\0' && out < end) {
    *out++ = *s++;
  }
  return out;
}

__device__ __forceinline__ char* append_u32(char* out, const char* end, uint32_t v) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0 && out < end) {
    *out++ = digits[--n];
  }
  return out;
}

// "1, 3, 5" (and " and N more" when not all are listed), NUL-terminated.
__device__ __forceinline__ void format_peers(char* out, uint32_t capacity,
                                             const uint32_t* peers, uint32_t listed,
                                             uint32_t missing) {
  const char* end = out + capacity - 1;
  for (uint32_t i = 0; i < listed; ++i) {
    if (i != 0) {
      out = append_text(out, end, ", ");
    }
    out = append_u32(out, end, peers[i]);
  }
  if (missing > listed) {
    out = append_text(out, end, " and ");
    out = append_u32(out, end, missing - listed);
    out = append_text(out, end, " more");
  }
  *out = '\0';
}

}  // namespace detail

// The trap aborts the kernel at once; give a printed line (and a record) time to land
// in memory first, or it can be lost. Every trap of the kernels goes through here.
__device__ __forceinline__ void flush_then_trap() {
  __threadfence_system();
  const uint64_t flushed = global_timer_ns() + kTrapDelayNs;
  while (global_timer_ns() < flushed) {
    __nanosleep(1000);
  }
  __trap();
}

// Records the timeout in the host-mapped record, prints one line, and traps.
// `peers` lists up to `listed` of the `missing` late peers; `exited_pid` is 0 for a
// timeout, else the pid of peers[0], whose end ended the wait. Call from one thread
// only (per timed-out wait or per BlockTimeouts); every caller traps. Not inlined, so
// the formatting stays out of the waits' spin loops; `report` by value, so the hot path
// never spills it to local memory.
__device__ __noinline__ void report_and_trap(WaitReport report, uint32_t channel,
                                             const uint32_t* peers, uint32_t listed,
                                             uint32_t missing, uint64_t waited_ns,
                                             uint32_t exited_pid) {
  listed = listed < kRecordPeers ? listed : kRecordPeers;
  volatile TimeoutRecord* record = reinterpret_cast<volatile TimeoutRecord*>(report.record);
  // Another kernel of this process may have reported already (another module, another
  // stream): keep the first record whole.
  if (atomicCAS(&detail::g_report_claimed, 0u, 1u) == 0u && record->state == 0u) {
    record->op = report.op;
    record->channel = channel;
    record->rank = report.rank;
    record->missing = missing;
    record->listed = listed;
    record->waited_ns = waited_ns;
    record->timeout_ns = report.timeout_ns;
    for (uint32_t i = 0; i < listed; ++i) {
      record->peers[i] = peers[i];
    }
    record->exited_pid = exited_pid;
    __threadfence_system();  // the host must never see `state` before the fields
    record->state = kRecordComplete;
    __threadfence_system();
  }
  const unsigned long long tenths_ms = waited_ns / 100000ull;
  if (exited_pid != 0u) {
    printf(
        "symmwin: device %s on rank %u, channel %u: rank %u (pid %u) exited while rank %u "
        "waited for it (%llu.%llu ms); trapping, the CUDA context is lost and the process "
        "must exit\n",
        op_name(report.op), report.rank, channel, peers[0], exited_pid, report.rank,
        tenths_ms / 10ull, tenths_ms % 10ull);
    flush_then_trap();
  }
  char peer_list[128];
  detail::format_peers(peer_list, sizeof(peer_list), peers, listed, missing);
  printf(
      "symmwin: device %s timed out on rank %u, channel %u: waited %llu.%llu ms "
      "(limit %llu ms) for rank(s) %s; trapping, the CUDA context is lost and the "
      "process must exit\n",
      op_name(report.op), report.rank, channel, tenths_ms / 10ull, tenths_ms % 10ull,
      static_cast<unsigned long long>(report.timeout_ns / 1000000ull), peer_list);
  flush_then_trap();
}

// One thread signals `peer` through `slot`; traps with a report on timeout.
__device__ __forceinline__ void put_or_trap(const WaitReport& report, uint32_t* slot,
                                            uint32_t peer, uint32_t channel) {
  const uint64_t waited = timed_put(report, slot, peer, channel);
  if (waited != 0) {
    const uint32_t late[1] = {peer};
    report_and_trap(report, channel, late, 1, 1, waited, 0);
  }
}

// One thread waits for `peer`'s signal in `slot`; traps with a report on timeout.
__device__ __forceinline__ void wait_or_trap(const WaitReport& report, uint32_t* slot,
                                             uint32_t peer, uint32_t channel) {
  const uint64_t waited = timed_wait(report, slot, peer, channel);
  if (waited != 0) {
    const uint32_t late[1] = {peer};
    report_and_trap(report, channel, late, 1, 1, waited, 0);
  }
}

// Collects the timed-out waits of one block so a single report names every late peer.
// Use: declare `__shared__ BlockTimeouts t;`, one thread calls `t.init(participants)`,
// then __syncthreads() (before any thread returns early); each participating thread
// calls `t.finish(...)` exactly once when its waits are done (waited_ns 0: success).
// The last participant to finish reports and traps if any wait timed out. Every
// participant's wait is bounded by its own deadline, so the report is never later
// than the slowest deadline.
struct BlockTimeouts {
  uint32_t pending;
  uint32_t missing;
  unsigned long long waited_ns;
  uint32_t peers[kRecordPeers];

  __device__ __forceinline__ void init(uint32_t participants) {
    pending = participants;
    missing = 0;
    waited_ns = 0;
  }

  __device__ __forceinline__ void finish(const WaitReport& report, uint32_t channel,
                                         uint32_t peer, uint64_t waited) {
    if (waited != 0) {
      const uint32_t index = atomicAdd(&missing, 1u);
      if (index < kRecordPeers) {
        peers[index] = peer;
      }
      atomicMax(&waited_ns, static_cast<unsigned long long>(waited));
    }
    __threadfence_block();  // this thread's entry is visible before it counts as done
    if (atomicSub(&pending, 1u) != 1u) {
      return;
    }
    __threadfence_block();
    const uint32_t late = *static_cast<volatile uint32_t*>(&missing);
    if (late != 0) {
      const uint32_t listed = late < kRecordPeers ? late : kRecordPeers;
      uint32_t copy[kRecordPeers];
      for (uint32_t i = 0; i < listed; ++i) {
        copy[i] = static_cast<volatile uint32_t*>(peers)[i];
      }
      report_and_trap(report, channel, copy, listed, late,
                      *static_cast<volatile unsigned long long*>(&waited_ns), 0);
    }
  }
};

}  // namespace symmwin
