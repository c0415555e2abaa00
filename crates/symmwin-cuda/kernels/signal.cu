// Signal-pad kernels for symmwin: barrier, put_signal and wait_signal.
//
// The protocol is torch's SymmetricMemory one, so torch's own kernels and ours can
// share a pad: the slot for (channel, src) in the receiver's pad is
// `channel * world + src` (uint32); put is a system-scope CAS 0 -> 1 with release
// semantics, wait a CAS 1 -> 0 with acquire semantics. Pads are zero at rest.
//
// Peer pads are addressed arithmetically (pads.cuh): rank r's pad is at
// `base + r * stride`. The kernels take one argument, SignalParams (signal_params.cuh),
// whose layout the host mirrors and tests; `__grid_constant__`, as in ops.cu, so that
// helpers taking it by reference read it in place instead of from a per-thread copy.
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

#include "pads.cuh"
#include "signal_params.cuh"
#include "wait.cuh"

namespace symmwin_signal {

__device__ __forceinline__ uint32_t* pad_slot(const SignalParams& p, uint32_t owner,
                                               uint32_t channel, uint32_t src) {
  return symmwin::pad_word(p.pad_base, p.pad_stride, owner, p.world, channel, src);
}

}  // namespace symmwin_signal

// A named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with
// a hash of the source path, so the committed PTX would differ between checkouts.
using namespace symmwin_signal;

// One block; thread t < world (t != rank) signals peer t, then waits for peer t.
// A peer that does not answer in time is collected in `late`; the last thread to finish
// reports every late peer in one record and traps.
extern "C" __global__ void symmwin_barrier(const __grid_constant__ SignalParams p) {
  __shared__ symmwin::BlockTimeouts late;
  const uint32_t peer = threadIdx.x;
  const uint32_t rank = p.wait.rank;
  if (peer == 0) {
    late.init(p.world - 1);
  }
  __syncthreads();
  if (peer >= p.world || peer == rank) {
    return;
  }
  uint64_t waited = symmwin::timed_put(p.wait, pad_slot(p, peer, p.channel, rank), peer, p.channel);
  if (waited == 0) {
    waited = symmwin::timed_wait(p.wait, pad_slot(p, rank, p.channel, peer), peer, p.channel);
  }
  late.finish(p.wait, p.channel, peer, waited);
  // Later work on the stream starts only after every thread has finished, so each
  // thread's acquire covers it; no block-wide sync is needed.
}

// One thread: signal `p.peer` on `p.channel`.
extern "C" __global__ void symmwin_put_signal(const __grid_constant__ SignalParams p) {
  if (threadIdx.x != 0) {
    return;
  }
  symmwin::put_or_trap(p.wait, pad_slot(p, p.peer, p.channel, p.wait.rank), p.peer, p.channel);
}

// One thread: wait for `p.peer`'s signal on `p.channel`.
extern "C" __global__ void symmwin_wait_signal(const __grid_constant__ SignalParams p) {
  if (threadIdx.x != 0) {
    return;
  }
  symmwin::wait_or_trap(p.wait, pad_slot(p, p.wait.rank, p.channel, p.peer), p.peer, p.channel);
}
