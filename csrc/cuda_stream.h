// The current CUDA stream of a device. No CUDA header is included, so the adapter
// builds on machines without a CUDA toolkit: the stream comes through c10's
// device-generic stream interface instead.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

inline void* cuda_stream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->getStream(device)
      .native_handle();
}

#pragma GCC visibility pop

} // namespace symmwin_torch
