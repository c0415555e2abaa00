// The kernel ops_schemas.cpp registers with its schema (a catch-all kernel: the op
// takes no tensor to dispatch on).
#pragma once

#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <cstdint>

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

void wait_signal(
    const c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory>& hdl,
    int64_t peer);

#pragma GCC visibility pop

} // namespace symmwin_torch
