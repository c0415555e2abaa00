// The C ABI's statuses and last error as torch / Python exceptions: symmwin's own
// timeouts as `symmwin.TimeoutError` (a torch DistBackendError), an interrupted wait
// as the exception Python's signal handler set, anything else as a c10::Error.

#include "errors.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <string>

namespace {

namespace py = pybind11;

// symmwin's own timeouts (rendezvous, host-side waits, the report after a device
// wait timed out): `symmwin.TimeoutError` in Python, a torch DistBackendError.
struct SymmwinTimeoutError : c10::DistBackendError {
  using c10::DistBackendError::DistBackendError;
};

// The statuses that are symmwin's own timeouts: peers that did not come in time, and
// every call after a device wait timed out and trapped (the context is lost).
bool is_own_timeout(SymmwinStatus status) {
  return status == SYMMWIN_TIMEOUT || status == SYMMWIN_CONTEXT_LOST;
}

// A host wait the interpreter's signal handler interrupted (Ctrl-C): the handler
// already set its exception (KeyboardInterrupt), which goes up as it is.
[[noreturn]] void raise_interrupted(const std::string& message) {
  {
    py::gil_scoped_acquire gil;
    if (PyErr_Occurred()) {
      throw py::error_already_set();
    }
  }
  TORCH_CHECK(false, message);
}

// Whether `message` names `op` as a word of its own (not inside a longer op's name,
// "all_to_all" in "all_to_all_vdev"), so the prefix need not name it again.
bool names_op(const std::string& message, const std::string& op) {
  const auto part_of_name = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
  };
  for (auto at = message.find(op); at != std::string::npos; at = message.find(op, at + 1)) {
    const auto end = at + op.size();
    const bool starts = at == 0 || !part_of_name(message[at - 1]);
    const bool ends = end == message.size() || !part_of_name(message[end]) || message[end] == '.';
    if (starts && ends) {
      return true;
    }
  }
  return false;
}

} // namespace

void symmwin_torch::check(SymmwinStatus status) {
  if (status == SYMMWIN_OK) {
    return;
  }
  if (status == SYMMWIN_INTERRUPTED) {
    raise_interrupted(symmwin_last_error());
  }
  const std::string last = symmwin_last_error();
  const std::string message = last.empty()
      ? "symmwin: call failed with status " + std::to_string(static_cast<int>(status))
      : last;
  if (is_own_timeout(status)) {
    throw SymmwinTimeoutError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
  }
  TORCH_CHECK(false, message);
}

void symmwin_torch::check_op(const char* op, SymmwinStatus status) {
  if (status == SYMMWIN_OK) {
    return;
  }
  // The op is named once: by the core's message when it does, else by the prefix.
  const std::string last = symmwin_last_error();
  const std::string message = names_op(last, op) ? last : "symmwin." + std::string(op) + ": " + last;
  if (status == SYMMWIN_INTERRUPTED) {
    raise_interrupted(message);
  }
  if (is_own_timeout(status)) {
    throw SymmwinTimeoutError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
  }
  TORCH_CHECK(false, message);
}

void symmwin_torch::def_timeout_error(py::module_& m) {
  // Leaked on purpose: the class must outlive every exception raised at exit.
  static auto* timeout_error = new py::object(py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc(
          "symmwin.TimeoutError",
          "symmwin's own timeout: peers did not arrive in time (a DistBackendError).",
          py::module_::import("torch.distributed").attr("DistBackendError").ptr(),
          nullptr)));
  m.attr("TimeoutError") = *timeout_error;
  // Global, not module-local: the error is raised inside torch's own bindings
  // (symm_mem.rendezvous, hdl.barrier, ...). Newer translators are tried first.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const SymmwinTimeoutError& e) {
      PyErr_SetString(timeout_error->ptr(), e.what_without_backtrace());
    }
  });
}
