// The process-group backend of a group, as the C ABI's SymmwinRemote callbacks: how
// symmwin reaches the ranks it cannot map (other hosts) through the group's own c10d
// ProcessGroup (gloo for CPU tensors, NCCL for CUDA tensors).
#pragma once

#include <symmwin.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace symmwin_torch {

// Callbacks over `pg` for memory on `device` (-1: host memory). The callbacks hold
// the process group weakly: once torch destroys it, they fail with a clear message.
SymmwinRemote make_remote(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int device);

} // namespace symmwin_torch
