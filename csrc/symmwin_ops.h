// What csrc/ops.cpp needs from the backend in csrc/symmwin_torch.cpp.
#pragma once

#include <symmwin.h>

#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

namespace symmwin_torch {

// The window behind a symmwin handle; nullptr for a handle of any other backend.
SymmwinWindow* window_of(
    const c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory>& handle);

// Throws for a failed status, prefixing the core's message with "symmwin.<op>: ":
// symmwin.TimeoutError for symmwin's own timeouts and a lost context, else a
// c10::Error (RuntimeError).
void check_op(const char* op, SymmwinStatus status);

} // namespace symmwin_torch
