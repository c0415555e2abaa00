// put / get, the 64-bit value signals and the handshakes around copy-engine
// transfers. Part of the ops module (ops.cu).
#pragma once

#include "ops_device.cuh"

// A named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with
// a hash of the source path, so the committed PTX would differ between checkouts.
using namespace symmwin_ops;

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
//   SYMMWIN_HS_WAIT_*: then wait for `peer` or every other rank;
//   SYMMWIN_HS_ANSWER_NEXT: (waiting for `peer` alone) answer a mismatch on channel + 1.
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
  if ((p.mode & SYMMWIN_HS_ANSWER_NEXT) != 0) {
    if (wait) {
      wait_peer_answering(p, t, p.channel, p.channel + 1);
    }
    return;
  }
  peer_handshake(p, p.channel, p.channel, signal, wait);
}
