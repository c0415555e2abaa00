// symmwin's SymmetricMemory handle (one window), and the queries on a handle of any
// backend that torch does not expose.
#pragma once

#include <symmwin.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <vector>

namespace symmwin_torch {

// The window behind a symmwin handle; nullptr for a handle of any other backend.
SymmwinWindow* window_of(
    const c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory>& handle);

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

// The handle of a window the core made; it releases the window when dropped.
c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory> make_handle(SymmwinWindow* window);

// (base, stride) with buffer_ptrs[r] == base + r * stride.
pybind11::tuple flat_layout(c10d::symmetric_memory::SymmetricMemory& handle);

// Ranks whose memory a handle maps (load/store reachable), in rank order.
std::vector<int> direct_peers(c10d::symmetric_memory::SymmetricMemory& handle);

#pragma GCC visibility pop

} // namespace symmwin_torch
