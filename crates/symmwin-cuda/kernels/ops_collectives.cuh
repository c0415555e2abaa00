// The collective kernels with equal sizes: all_to_all and broadcast. Part of the ops
// module (ops.cu); the all_to_all_vdev family is in ops_vdev.cuh.
#pragma once

#include "ops_device.cuh"

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
  SYMMWIN_OPS_TRACE_POINT(0);
  const uint32_t bpp = p.blocks_per_peer;
  uint32_t peer, part;
  peer_and_share(p, &peer, &part);
  SYMMWIN_OPS_TRACE_POINT(2);
  const char* src = operand_at(p.src, p.rank) + static_cast<uint64_t>(peer) * p.bytes;
  char* dst = operand_at(p.dst, peer) + static_cast<uint64_t>(p.rank) * p.bytes;
  if (peer == p.rank) {
    copy_part(dst, src, p.bytes, part, bpp);
    SYMMWIN_OPS_TRACE_POINT(8);
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
  // The root waits for our `done`: a mismatch answers there, so it fails naming us.
  if (threadIdx.x == 0) {
    wait_peer_answering(p, root, ready, done);
  }
  __syncthreads();
  copy_part(operand_at(p.dst, p.rank), operand_at(p.src, root), p.bytes, part, bpp);
  block_signal(p, root, done);
}
