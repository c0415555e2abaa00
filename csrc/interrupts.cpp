// The core's interrupt hook: Python's signal handlers, run on the thread that
// imported symmwin.

#include "interrupts.h"

#include <thread>

namespace {

// The thread that imported symmwin: Python runs signal handlers only on the main
// thread, which is the one that imports.
const std::thread::id import_thread = std::this_thread::get_id();

} // namespace

extern "C" int32_t python_signal_raised() noexcept {
  if (std::this_thread::get_id() != import_thread || !Py_IsInitialized()) {
    return 0;
  }
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) {
    return 0;
  }
#else
  if (_Py_IsFinalizing()) {
    return 0;
  }
#endif
  const PyGILState_STATE gil = PyGILState_Ensure();
  const int raised = PyErr_CheckSignals() != 0 ? 1 : 0;

  PyGILState_Release(gil);
  return raised;
}
