// The by-value parameter block of every kernel in ops.cu and the host-mapped failure
// record they write. The layout is mirrored by `crates/symmwin-cuda/src/ops/params.rs`; both
// sides check sizes and offsets (static_asserts here, a unit test there), so a field
// added on one side only fails to build or fails the test.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "wait.cuh"

#define SYMMWIN_OPS_THREADS 512
// Split-table entries (world * experts) the all_to_all_vdev kernel plans in shared memory.
#define SYMMWIN_OPS_MAX_SPLITS 2048
// Experts per rank (segments per source) of the 2-D ops.
#define SYMMWIN_OPS_MAX_EXPERTS 512
// Ranks a tile reduce's root set can name (OpsParams::roots bits).
#define SYMMWIN_OPS_MAX_ROOT_WORLD 256

// OpsParams::rank of a kernel that knows no group (a local wait).
#define SYMMWIN_OPS_UNKNOWN_RANK 4294967295

// OpsParams::wait.op: the op, numbered as symmwin::WaitOp in wait.cuh (1-3 are the
// signal kernels'), so a timeout and an overflow name it the same way.
#define SYMMWIN_OP_PUT_SIGNAL 2
#define SYMMWIN_OP_ALL_TO_ALL 4
#define SYMMWIN_OP_ALL_TO_ALL_VDEV 5
#define SYMMWIN_OP_ALL_TO_ALL_VDEV_2D 6
#define SYMMWIN_OP_ALL_TO_ALL_VDEV_2D_OFFSET 7
#define SYMMWIN_OP_BROADCAST 8
#define SYMMWIN_OP_WAIT_FOR_SIGNAL 9
#define SYMMWIN_OP_TILE_REDUCE 10
#define SYMMWIN_OP_MULTI_ROOT_TILE_REDUCE 11
#define SYMMWIN_OP_PUT 12
#define SYMMWIN_OP_GET 13
#define SYMMWIN_OP_PUT_WITH_SIGNAL 14

// OpsParams::mode of the all_to_all_vdev kernels.
#define SYMMWIN_A2AV_1D 0
#define SYMMWIN_A2AV_2D 1
#define SYMMWIN_A2AV_2D_OFFSET 2
// OpsParams::mode of symmwin_ops_copy.
#define SYMMWIN_COPY_PUT 0
#define SYMMWIN_COPY_GET 1
// OpsParams::mode bits of symmwin_ops_handshake.
#define SYMMWIN_HS_SIGNAL_PEER 1
#define SYMMWIN_HS_SIGNAL_ALL 2
#define SYMMWIN_HS_WAIT_PEER 4
#define SYMMWIN_HS_WAIT_ALL 8
// With SYMMWIN_HS_WAIT_PEER: a mismatched signal is answered on channel + 1, where
// `peer` waits next, so it fails naming this rank too (see wait_peer_answering).
#define SYMMWIN_HS_ANSWER_NEXT 16
// OpsParams::mode of the tile reduce kernel: the element type.
#define SYMMWIN_DTYPE_F32 0
#define SYMMWIN_DTYPE_BF16 1
#define SYMMWIN_DTYPE_F16 2
#define SYMMWIN_DTYPE_F64 3

// OpsError::kind (timeouts go to wait.cuh's TimeoutRecord).
#define SYMMWIN_OPS_ERR_OVERFLOW 2
#define SYMMWIN_OPS_ERR_BAD_SPLIT 3
// A peer's signal carried another operand fingerprint: rows = the peer's, room = ours.
#define SYMMWIN_OPS_ERR_MISMATCH 4

// One operand: rank r's copy is `bytes` bytes at `base + r * stride + offset`.
struct Operand {
  uint64_t base;
  uint64_t stride;
  uint64_t offset;
  uint64_t bytes;
};

struct OpsParams {
  Operand src;         // input, in_tile, the put/get source
  Operand dst;         // out, out_tile, the put/get destination
  Operand src_splits;  // in_splits / in_splits_offsets (int64)
  Operand dst_splits;  // out_splits_offsets (int64); the signal word of *_value
  uint64_t pad_base;   // signal pads: rank r's at pad_base + r * pad_stride
  uint64_t pad_stride;
  uint64_t err;        // device address of the host-mapped OpsError (splits that do not fit)
  symmwin::WaitReport wait;  // where and how a timed-out wait reports (wait.cuh); its op
                             // is the op's SYMMWIN_OP_*, its timeout every wait's limit
  uint64_t row_bytes;  // all_to_all_vdev*: bytes per row; tiles: bytes between rows
  uint64_t bytes;      // bytes per peer (all_to_all), per copy (broadcast, put, get), per tile row
  uint64_t rows;       // tile rows
  uint64_t value;      // put_with_signal / wait_for_signal value
  int64_t major_align; // all_to_all_vdev_2d: alignment of each expert's rows
  uint32_t rank;
  uint32_t world;
  uint32_t peer;       // put/get/signal peer, broadcast root
  uint32_t experts;    // experts per rank (1 for the 1-D op)
  uint32_t blocks_per_peer;
  uint32_t channel;    // first pad channel the op uses
  uint32_t mode;       // SYMMWIN_A2AV_*, SYMMWIN_COPY_*, SYMMWIN_HS_*, SYMMWIN_DTYPE_*
  uint32_t fingerprint;  // the value of every pad signal of the op (never 0): the ranks'
                         // operand fingerprint (provider/device_ops/fingerprint.rs), 1 for
                         // one-sided ops
  uint64_t roots[SYMMWIN_OPS_MAX_ROOT_WORLD / 64];  // tile reduce: bit r = rank r is a root
};

// What the device recorded when received or sent splits did not fit (timeouts go to
// wait.cuh's TimeoutRecord); `word` is written last.
struct OpsError {
  uint32_t word;  // 1 << 31 | peer; 0 when clear
  uint32_t kind;  // SYMMWIN_OPS_ERR_*
  uint32_t op;    // SYMMWIN_OP_*
  uint32_t rank;
  int64_t rows;   // rows of the split that did not fit
  int64_t room;   // rows there was room for
};

static_assert(sizeof(Operand) == 32, "Operand layout");
static_assert(offsetof(OpsParams, dst) == 32, "OpsParams layout");
static_assert(offsetof(OpsParams, src_splits) == 64, "OpsParams layout");
static_assert(offsetof(OpsParams, dst_splits) == 96, "OpsParams layout");
static_assert(offsetof(OpsParams, pad_base) == 128, "OpsParams layout");
static_assert(offsetof(OpsParams, err) == 144, "OpsParams layout");
static_assert(offsetof(OpsParams, wait) == 152, "OpsParams layout");
static_assert(offsetof(OpsParams, row_bytes) == 184, "OpsParams layout");
static_assert(offsetof(OpsParams, bytes) == 192, "OpsParams layout");
static_assert(offsetof(OpsParams, rows) == 200, "OpsParams layout");
static_assert(offsetof(OpsParams, value) == 208, "OpsParams layout");
static_assert(offsetof(OpsParams, major_align) == 216, "OpsParams layout");
static_assert(offsetof(OpsParams, rank) == 224, "OpsParams layout");
static_assert(offsetof(OpsParams, blocks_per_peer) == 240, "OpsParams layout");
static_assert(offsetof(OpsParams, mode) == 248, "OpsParams layout");
static_assert(offsetof(OpsParams, fingerprint) == 252, "OpsParams layout");
static_assert(offsetof(OpsParams, roots) == 256, "OpsParams layout");
static_assert(sizeof(OpsParams) == 288, "OpsParams layout");
static_assert(sizeof(OpsError) == 32, "OpsError layout");
static_assert(offsetof(OpsError, rows) == 16, "OpsError layout");
static_assert(offsetof(OpsError, room) == 24, "OpsError layout");
