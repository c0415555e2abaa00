// The argument of the signal kernels (signal.cu), passed by value. Mirrored by
// `SignalParams` in crates/symmwin-cuda/src/signal_params.rs, whose tests read
// the static_asserts below: change both together.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "wait.cuh"

struct SignalParams {
  uint64_t pad_base;    // rank r's pad at pad_base + r * pad_stride (pads.cuh)
  uint64_t pad_stride;
  uint32_t world;
  uint32_t peer;        // put_signal: the destination; wait_signal: the source; barrier: 0
  uint32_t channel;
  uint32_t _reserved;
  symmwin::WaitReport wait;  // where and how a timed-out wait reports; wait.rank is ours
};

static_assert(offsetof(SignalParams, pad_base) == 0, "SignalParams layout");
static_assert(offsetof(SignalParams, pad_stride) == 8, "SignalParams layout");
static_assert(offsetof(SignalParams, world) == 16, "SignalParams layout");
static_assert(offsetof(SignalParams, peer) == 20, "SignalParams layout");
static_assert(offsetof(SignalParams, channel) == 24, "SignalParams layout");
static_assert(offsetof(SignalParams, wait) == 32, "SignalParams layout");
static_assert(sizeof(SignalParams) == 64, "SignalParams layout");
