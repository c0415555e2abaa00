// Signal-pad addressing, the device mirror of `PadLayout` (crates/symmwin-device/src/layout.rs):
// rank r's pad is at `base + r * stride`, and the uint32 word for (channel, src) in a
// pad is at index `channel * world + src` (torch's SymmetricMemory protocol).
// Every kernel that touches a pad addresses it through this one function.
#pragma once

#include <stdint.h>

namespace symmwin {

__device__ __forceinline__ uint32_t* pad_word(uint64_t base, uint64_t stride, uint32_t owner,
                                              uint32_t world, uint32_t channel, uint32_t src) {
  const uint64_t index = static_cast<uint64_t>(channel) * world + src;
  return reinterpret_cast<uint32_t*>(base + static_cast<uint64_t>(owner) * stride +
                                     index * sizeof(uint32_t));
}

}  // namespace symmwin
