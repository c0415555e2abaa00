// What csrc/ops.cpp needs from the backend in csrc/symmwin_torch.cpp.
#pragma once

#include <Python.h>
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

// Runs `call`, a symmwin call that may wait for peers, without holding Python's GIL
// (when this thread holds it), so other Python threads run meanwhile and a signal sent
// from one of them reaches the wait; the core's interrupt hook takes the GIL back for
// the moment it runs Python's signal handlers.
template <typename F>
SymmwinStatus without_gil(F&& call) {
  struct Released {
    PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    ~Released() {
      if (saved != nullptr) {
        PyEval_RestoreThread(saved);
      }
    }
  } released;
  return call();
}

} // namespace symmwin_torch
