// The C ABI's statuses and last error as torch / Python exceptions.
#pragma once

#include <symmwin.h>

#include <pybind11/pybind11.h>

namespace symmwin_torch {

// Throws for a failed status, prefixing the core's message with "symmwin.<op>: ":
// symmwin.TimeoutError for symmwin's own timeouts and a lost context, else a
// c10::Error (RuntimeError).
void check_op(const char* op, SymmwinStatus status);

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

// Every failure becomes a c10::Error (a RuntimeError in Python) carrying the
// core's message, which already starts with "symmwin".
void check(SymmwinStatus status);

// `symmwin.TimeoutError` (a DistBackendError), and the translation of the core's
// timeouts into it.
void def_timeout_error(pybind11::module_& m);

#pragma GCC visibility pop

} // namespace symmwin_torch
