// Signal-pad kernels for symmwin: barrier, put_signal and wait_signal.
//
// The protocol is torch's SymmetricMemory one, so torch's own kernels and ours can
// share a pad: the slot for (channel, src) in the receiver's pad is
// `channel * world + src` (uint32); put is a system-scope CAS 0 -> 1 with release
// semantics, wait a CAS 1 -> 0 with acquire semantics. Pads are zero at rest.
//
// Peer pads are addressed arithmetically: rank r's pad is at `base + r * stride`.
// Addresses travel as 64-bit integers so the host side passes plain u64s.
//
// A wait that outlives `timeout_ns` (measured with %globaltimer) gives up, records the
// peer in a host-mapped error word and returns; the host reports it as a timeout. We
// never trap: a trap poisons the whole CUDA context, torch's included.
//
// Build: kernels/build_ptx.sh (nvcc -ptx -arch=compute_90 -O3). The PTX is committed
// and loaded through cuModuleLoadData, so installing needs no CUDA toolkit.

#include <stdint.h>

namespace {

// Bit 31 marks the word as set, so peer 0 is distinguishable from "no error".
constexpr uint32_t kErrorFlag = 1u << 31;

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t* pad_slot(uint64_t base, uint64_t stride,
                                               uint32_t owner, uint32_t world,
                                               uint32_t channel, uint32_t src) {
  const uint64_t index = static_cast<uint64_t>(channel) * world + src;
  return reinterpret_cast<uint32_t*>(base + static_cast<uint64_t>(owner) * stride +
                                     index * sizeof(uint32_t));
}

// The error record in host-mapped memory (layout of ErrorRecord in signals.rs):
//   u32 word      kErrorFlag | peer, 0 when clear
//   u32 padding
//   u64 waited_ns how long this wait lasted
// First writer wins in the common case; a lost race only mixes up which of two
// timed-out peers gets reported. The host reads and clears the word between launches.
__device__ __forceinline__ void report_timeout(uint64_t err, uint32_t peer,
                                               uint64_t waited_ns) {
  volatile uint32_t* word = reinterpret_cast<volatile uint32_t*>(err);
  volatile uint64_t* waited = reinterpret_cast<volatile uint64_t*>(err + 8);
  if (*word == 0) {
    *waited = waited_ns;
    __threadfence_system();  // the host must never see the word before the duration
    *word = kErrorFlag | (peer & ~kErrorFlag);
    __threadfence_system();
  }
}

// System-scope CAS with release (put) or acquire (wait) semantics, as torch's kernels
// do through cuda::atomic_ref: a release CAS orders this thread's earlier writes before
// the signal without the full sequentially-consistent fence of __threadfence_system().
__device__ __forceinline__ uint32_t cas_release(uint32_t* slot, uint32_t expected, uint32_t desired) {
  uint32_t old;
  asm volatile("atom.release.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(slot), "r"(expected), "r"(desired)
               : "memory");
  return old;
}

__device__ __forceinline__ uint32_t cas_acquire(uint32_t* slot, uint32_t expected, uint32_t desired) {
  uint32_t old;
  asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(slot), "r"(expected), "r"(desired)
               : "memory");
  return old;
}

// The host may pass a saturated timeout (u64 max): never let the deadline wrap.
__device__ __forceinline__ uint64_t deadline_after(uint64_t timeout_ns) {
  const uint64_t now = global_timer_ns();
  return timeout_ns > ~0ull - now ? ~0ull : now + timeout_ns;
}

// Release: everything this thread wrote before is visible to the peer before it can
// observe the signal. The slot may still hold 1 when the peer has not consumed the
// previous signal yet; wait for it instead of losing a signal.
// Returns 0 on success, else the time waited (always > timeout_ns > 0).
__device__ __forceinline__ uint64_t put_signal(uint32_t* slot, uint64_t timeout_ns) {
  const uint64_t deadline = deadline_after(timeout_ns);
  while (cas_release(slot, 0u, 1u) != 0u) {
    const uint64_t now = global_timer_ns();
    if (now > deadline) {
      return now - deadline + timeout_ns;
    }
  }
  return 0;
}

// Acquire: every later read of this thread is ordered after the signal.
// Returns 0 on success, else the time waited (always > timeout_ns > 0).
__device__ __forceinline__ uint64_t wait_signal(uint32_t* slot, uint64_t timeout_ns) {
  const uint64_t deadline = deadline_after(timeout_ns);
  while (cas_acquire(slot, 1u, 0u) != 1u) {
    const uint64_t now = global_timer_ns();
    if (now > deadline) {
      return now - deadline + timeout_ns;
    }
  }
  return 0;
}

}  // namespace

// One block; thread t < world (t != rank) signals peer t, then waits for peer t.
extern "C" __global__ void symmwin_barrier(uint64_t base, uint64_t stride, uint32_t rank,
                                           uint32_t world, uint32_t channel,
                                           uint64_t timeout_ns, uint64_t err) {
  const uint32_t peer = threadIdx.x;
  if (peer >= world || peer == rank) {
    return;
  }
  uint64_t waited = put_signal(pad_slot(base, stride, peer, world, channel, rank), timeout_ns);
  if (waited == 0) {
    waited = wait_signal(pad_slot(base, stride, rank, world, channel, peer), timeout_ns);
  }
  if (waited != 0) {
    report_timeout(err, peer, waited);
  }
  // Later work on the stream starts only after every thread has finished, so each
  // thread's acquire covers it; no block-wide sync is needed.
}

// One thread: signal `dst` on `channel`.
extern "C" __global__ void symmwin_put_signal(uint64_t base, uint64_t stride, uint32_t rank,
                                              uint32_t world, uint32_t dst,
                                              uint32_t channel, uint64_t timeout_ns,
                                              uint64_t err) {
  if (threadIdx.x != 0) {
    return;
  }
  const uint64_t waited =
      put_signal(pad_slot(base, stride, dst, world, channel, rank), timeout_ns);
  if (waited != 0) {
    report_timeout(err, dst, waited);
  }
}

// One thread: wait for `src`'s signal on `channel`.
extern "C" __global__ void symmwin_wait_signal(uint64_t base, uint64_t stride,
                                               uint32_t rank, uint32_t world, uint32_t src,
                                               uint32_t channel, uint64_t timeout_ns,
                                               uint64_t err) {
  if (threadIdx.x != 0) {
    return;
  }
  const uint64_t waited =
      wait_signal(pad_slot(base, stride, rank, world, channel, src), timeout_ns);
  if (waited != 0) {
    report_timeout(err, src, waited);
  }
}
