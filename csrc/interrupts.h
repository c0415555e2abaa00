// Waits that Python can interrupt: a wait for peers runs without the GIL, and the
// core's interrupt hook runs Python's signal handlers.
#pragma once

#include <Python.h>
#include <symmwin.h>

#include <cstdint>

// The core's interrupt hook (symmwin_set_interrupt_check): called by every host wait
// at least every 50 ms, on the waiting thread. On the main thread it runs the
// interpreter's pending signal handlers (taking the GIL for that moment); nonzero when
// one raised (KeyboardInterrupt), so the wait ends. Never throws, never touches Python
// during finalization.
extern "C" int32_t python_signal_raised() noexcept;

namespace symmwin_torch {

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
