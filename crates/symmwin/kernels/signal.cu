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
// A wait that outlives its timeout (measured with %globaltimer) records who waited for
// whom in host-mapped memory, prints one line and traps (wait.cuh): the stream's next
// synchronization then fails, as torch's backend contract requires, and the next
// symmwin call reports the record. The trap loses the CUDA context, torch's included;
// a wait that returned quietly instead would let the program run on as if every peer
// had arrived.
//
// Build: kernels/build_ptx.sh (nvcc -ptx -arch=compute_90 -O3). The PTX is committed
// and loaded through cuModuleLoadData, so installing needs no CUDA toolkit.

#include <stdint.h>

#include "wait.cuh"

namespace {

__device__ __forceinline__ uint32_t* pad_slot(uint64_t base, uint64_t stride,
                                               uint32_t owner, uint32_t world,
                                               uint32_t channel, uint32_t src) {
  const uint64_t index = static_cast<uint64_t>(channel) * world + src;
  return reinterpret_cast<uint32_t*>(base + static_cast<uint64_t>(owner) * stride +
                                     index * sizeof(uint32_t));
}

}  // namespace

// One block; thread t < world (t != rank) signals peer t, then waits for peer t.
// A peer that does not answer in time is collected in `late`; the last thread to finish
// reports every late peer in one record and traps.
extern "C" __global__ void symmwin_barrier(uint64_t base, uint64_t stride, uint32_t world,
                                           uint32_t channel, symmwin::WaitReport report) {
  __shared__ symmwin::BlockTimeouts late;
  const uint32_t peer = threadIdx.x;
  const uint32_t rank = report.rank;
  if (peer == 0) {
    late.init(world - 1);
  }
  __syncthreads();
  if (peer >= world || peer == rank) {
    return;
  }
  uint64_t waited =
      symmwin::timed_put(pad_slot(base, stride, peer, world, channel, rank), report.timeout_ns);
  if (waited == 0) {
    waited = symmwin::timed_wait(pad_slot(base, stride, rank, world, channel, peer),
                                 report.timeout_ns);
  }
  late.finish(report, channel, peer, waited);
  // Later work on the stream starts only after every thread has finished, so each
  // thread's acquire covers it; no block-wide sync is needed.
}

// One thread: signal `dst` on `channel`.
extern "C" __global__ void symmwin_put_signal(uint64_t base, uint64_t stride, uint32_t world,
                                              uint32_t dst, uint32_t channel,
                                              symmwin::WaitReport report) {
  if (threadIdx.x != 0) {
    return;
  }
  symmwin::put_or_trap(report, pad_slot(base, stride, dst, world, channel, report.rank), dst,
                       channel);
}

// One thread: wait for `src`'s signal on `channel`.
extern "C" __global__ void symmwin_wait_signal(uint64_t base, uint64_t stride, uint32_t world,
                                               uint32_t src, uint32_t channel,
                                               symmwin::WaitReport report) {
  if (threadIdx.x != 0) {
    return;
  }
  symmwin::wait_or_trap(report, pad_slot(base, stride, report.rank, world, channel, src), src,
                        channel);
}
