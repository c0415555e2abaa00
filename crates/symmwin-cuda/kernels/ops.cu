// Device operations over symmwin windows: the all-to-all family, broadcast, put/get,
// value signals and tile reduce, with torch 2.11's NVSHMEM semantics.
//
// Addressing: every operand is a flat window plus a byte offset, so rank r's copy of
// it sits at `base + r * stride + offset` (struct Operand). Kernels take one
// by-value `OpsParams`; its layout is shared with `crates/symmwin-cuda/src/ops/params.rs` and
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
//
// Files: ops_device.cuh (addressing, failures, signals, copies), ops_collectives.cuh,
// ops_team.cuh (a plan's steps for a block or one warp), ops_vdev.cuh (the
// all_to_all_vdev family in one launch), ops_one_sided.cuh, ops_tile_reduce.cuh. They are compiled as this one translation
// unit, in this order, into one module (ops.ptx).

#include "ops_device.cuh"
#include "ops_collectives.cuh"
#include "ops_team.cuh"
#include "ops_vdev.cuh"
#include "ops_one_sided.cuh"
#include "ops_tile_reduce.cuh"
