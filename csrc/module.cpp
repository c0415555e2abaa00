// The `symmwin._C` module: the Python functions of symmwin's torch backend.
//
// Compiled against the installed torch only (its SymmetricMemory interface changes
// every minor release). No CUDA header is included, so the same source builds on
// machines without a CUDA toolkit.

#include <symmwin.h>

#include "allocator.h"
#include "errors.h"
#include "handle.h"
#include "ops_operands.h"

#include <c10/util/Exception.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>
// Declares c10::intrusive_ptr as a pybind11 holder, so that torch's
// `_SymmetricMemory` objects convert to the C++ handle.
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace py = pybind11;
namespace sm = c10d::symmetric_memory;
using symmwin_torch::check;

std::string handle_type(int device) {
  char buf[64];
  check(symmwin_handle_type(device, buf, sizeof(buf)));
  return buf;
}

// The core's size query says how much room the description takes.
std::string probe() {
  size_t needed = 0;
  check(symmwin_probe_json(nullptr, 0, &needed));
  std::string json(needed, '\0');
  check(symmwin_probe_json(json.data(), json.size(), &needed));
  json.resize(needed - 1);
  return json;
}

// `m.<name>(handle)`: `fn(*handle)`, with an error naming `name` when handle is None.
template <typename F>
void def_on_handle(py::module_& m, const char* name, F fn, const char* doc) {
  m.def(
      name,
      [name, fn](const c10::intrusive_ptr<sm::SymmetricMemory>& handle) {
        TORCH_CHECK(handle, name, ": handle is None");
        return fn(*handle);
      },
      py::arg("handle"),
      doc);
}

// The functions of one SymmetricMemory handle (any backend's) torch does not expose.
void def_handle_queries(py::module_& m) {
  def_on_handle(
      m, "flat_layout", symmwin_torch::flat_layout, "(base, stride) with buffer_ptrs[r] == base + r * stride.");
  def_on_handle(
      m,
      "rank_to_global",
      [](sm::SymmetricMemory& handle) { return handle.get_rank_to_global_rank(); },
      "Global rank of every group rank of a handle.");
  def_on_handle(
      m,
      "direct_peers",
      symmwin_torch::direct_peers,
      "Ranks whose memory a handle maps (load/store reachable), in rank order.");
  def_on_handle(
      m,
      "world_within_direct_access",
      [](sm::SymmetricMemory& handle) { return handle.world_within_direct_access(); },
      "True when every rank of the handle's group is mapped (torch does not expose it).");
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "symmwin's torch backend (C++ side); use the `symmwin` package.";
  m.def(
      "register",
      &symmwin_torch::register_backends,
      "Make SYMMWIN (CUDA) and SYMMWIN_HOST (CPU) available to set_backend. Idempotent.");
  def_handle_queries(m);
  m.def(
      "handle_type",
      &handle_type,
      py::arg("device"),
      "Memory handle type used on `device` (-1: host).");
  m.def("probe", &probe, "JSON description of this machine.");
  m.def(
      "release_groups",
      [](const std::optional<std::string>& name) {
        return symmwin_release_groups(name ? name->c_str() : nullptr);
      },
      py::arg("name") = py::none(),
      "Forget a destroyed process group (every group when None) and release its store.");
  m.def(
      "remove_sockets",
      &symmwin_remove_sockets,
      "Remove this process's socket files (at interpreter exit).");
  m.def(
      "version",
      [] { return std::string(symmwin_version()); },
      "The core's version and the git commit it was built from.");
  symmwin_torch::def_timeout_error(m);
  m.def(
      "engines",
      [] {
        return std::map<std::string, int>{
            {"default", SYMMWIN_ENGINE_DEFAULT},
            {"auto", SYMMWIN_ENGINE_AUTO},
            {"sm", SYMMWIN_ENGINE_SM},
            {"copy_engine", SYMMWIN_ENGINE_COPY_ENGINE}};
      },
      "Engine name -> code of the ops' engine setting (the C header's SYMMWIN_ENGINE_*).");
  m.def(
      "_swap_engine",
      &symmwin_torch::swap_engine,
      py::arg("code"),
      "Set this thread's engine code (as torch.ops.symmwin._set_engine does) and return "
      "the one it replaced.");
  m.def(
      "allocation_count",
      &symmwin_allocation_count,
      "Number of live symmwin allocations in this process.");
}
