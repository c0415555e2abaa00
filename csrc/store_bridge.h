// The C ABI's SymmwinStore callbacks over a c10d::Store: how the core reaches a
// process group's store.
#pragma once

#include <symmwin.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

// Who serves a process group's store, for errors when it stops answering. The
// TCPStore server runs in the process that created it: the one at MASTER_ADDR,
// global rank 0 unless the job set up the store itself.
std::string describe_store(const c10::intrusive_ptr<c10d::Store>& store);

// `describe` must outlive the call that passes the store to the core (it is copied).
SymmwinStore make_store(
    c10::intrusive_ptr<c10d::Store> store,
    const std::string& describe);

#pragma GCC visibility pop

} // namespace symmwin_torch
