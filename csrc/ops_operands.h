// torch.ops.symmwin.* tensors as the C ABI's operands (window, byte offset, length)
// and the options of an op (engine, stream).
#pragma once

#include <symmwin.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

using Handle = c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory>;

SymmwinOpOptions options_for(const at::Tensor& t);

// SymmwinOperand::dtype of a tensor: the core's code of its dtype (symmwin_dtype_code).
uint64_t operand_dtype(const at::Tensor& t);

// torch.ops.symmwin._set_engine / _get_engine: the engine of the ops on this thread.
void set_engine(int64_t code);
int64_t get_engine();
// set_engine, returning the setting it replaced: the engine= argument of symmwin.ops's
// wrappers, from Python without a trip through torch's dispatcher.
int64_t swap_engine(int64_t code);

// A tensor bound to its window; `handle` or `owned` keeps the window alive for the call.
struct Bound {
  Handle handle;
  std::shared_ptr<SymmwinWindow> owned;
  SymmwinOperand operand;
};

// The op a tensor is bound for, by name, and the group it runs on.
struct OpSite {
  const char* op;
  const std::string& group;
};

Bound bind_tensor(const at::Tensor& t, const OpSite& site, const char* what, size_t len);

// For one-sided ops: the window the tensor already has on the world group. A
// rendezvous is collective, and a one-sided op is called by one rank only, so it must
// never start one (torch's own tests rendezvous before put/get).
Bound bind_existing(const at::Tensor& t, const char* op, const char* what, size_t len);

// `sigpad` as an operand: inside the signal pad of `data`'s window (torch's tests
// pass `hdl.get_signal_pad(rank)`), or a symmetric tensor of its own.
Bound bind_sigpad(const Bound& data, const at::Tensor& sigpad, const char* op);

// The window of a symmwin handle; fails naming `op` for any other handle.
SymmwinWindow* window_of_handle(const Handle& hdl, const char* op);

size_t bytes(const at::Tensor& t);

#pragma GCC visibility pop

} // namespace symmwin_torch
