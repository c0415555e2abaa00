// torch.ops.symmwin.* tensors bound to their windows: the window a tensor lives in
// and its byte offset there (the core checks every range again), and the options
// (engine, stream) an op runs with.

#include "ops_operands.h"

#include "cuda_stream.h"
#include "errors.h"
#include "groups.h"
#include "handle.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <array>


namespace symmwin_torch {
namespace {

namespace sm = c10d::symmetric_memory;

// Engine of SymmwinOpOptions for ops on this thread: the one place this setting lives
// (torch.ops.symmwin._set_engine / _get_engine; symmwin.ops names the codes).
thread_local int64_t engine_override = SYMMWIN_ENGINE_DEFAULT;

// The core's code of a dtype (from c10::toString's name, which the core maps to the
// code of torch's Python name), computed once per ScalarType.
uint64_t dtype_code(c10::ScalarType type) {
  constexpr auto count = static_cast<size_t>(c10::ScalarType::NumOptions);
  static const auto codes = [] {
    std::array<uint64_t, count> all{};
    for (size_t i = 0; i < count; ++i) {
      all[i] = symmwin_dtype_code(c10::toString(static_cast<c10::ScalarType>(i)));
    }
    return all;
  }();
  const auto i = static_cast<size_t>(type);
  return i < count ? codes[i] : symmwin_dtype_code(c10::toString(type));
}

// The core's device index of a tensor: -1 for the host provider.
int core_device(const at::Tensor& t) {
  return t.is_cuda() ? t.device().index() : -1;
}

// `t`'s operand in the window its allocation already has on `group` (held until
// `out` goes), and the status of the lookup: SYMMWIN_NOT_FOUND when there is none yet.
SymmwinStatus find_window(const at::Tensor& t, const char* group, size_t len, Bound* out) {
  SymmwinWindow* window = nullptr;
  size_t offset = 0;
  const auto status = symmwin_window_existing(t.data_ptr(), group, core_device(t), &window, &offset);
  if (status == SYMMWIN_OK) {
    std::shared_ptr<SymmwinWindow> owned(window, [](SymmwinWindow* w) { symmwin_window_release(w); });
    *out = Bound{Handle(), owned, SymmwinOperand{window, offset, len, 0, dtype_code(t.scalar_type())}};
  }
  return status;
}

} // namespace

uint64_t operand_dtype(const at::Tensor& t) {
  return dtype_code(t.scalar_type());
}

SymmwinOpOptions options_for(const at::Tensor& t) {
  SymmwinOpOptions o{};
  o.engine = static_cast<int>(engine_override);
  o.timeout_ms = 0;
  o.stream = t.is_cuda() ? cuda_stream(t.device()) : nullptr;
  return o;
}

void set_engine(int64_t code) {
  TORCH_CHECK(
      code >= SYMMWIN_ENGINE_DEFAULT && code <= SYMMWIN_ENGINE_COPY_ENGINE,
      "symmwin: unknown engine code ",
      code);
  engine_override = code;
}

int64_t get_engine() {
  return engine_override;
}

int64_t swap_engine(int64_t code) {
  const int64_t before = engine_override;
  set_engine(code);
  return before;
}

Bound bind_tensor(const at::Tensor& t, const OpSite& site, const char* what, size_t len) {
  const auto& [op, group] = site;
  TORCH_CHECK(t.defined(), "symmwin.", op, ": ", what, " is undefined");
  // Every call after a tensor's first: its window is in the core's registry, so one
  // lookup replaces torch's rendezvous (group resolution, a new handle per operand).
  Bound found{};
  if (find_window(t, group.c_str(), len, &found) == SYMMWIN_OK) {
    return found;
  }
  Handle handle = sm::rendezvous(t, group);
  SymmwinWindow* window = handle ? symmwin_torch::window_of(handle) : nullptr;
  TORCH_CHECK(
      window != nullptr,
      "symmwin.",
      op,
      ": ",
      what,
      " is not symmwin symmetric memory (allocate it with symm_mem.empty after "
      "symm_mem.set_backend(\"SYMMWIN\") for CUDA or \"SYMMWIN_HOST\" for CPU)");
  // The window maps this rank's memory a second time, in the flat span; the tensor
  // sits at the same offset in it as in its allocation. get_offset() is where the
  // storage starts in the allocation (torch's MemPool hands out interior pointers).
  const auto storage = reinterpret_cast<uintptr_t>(t.storage().data_ptr().get());
  const auto ptr = reinterpret_cast<uintptr_t>(t.data_ptr());
  TORCH_CHECK(ptr >= storage, "symmwin.", op, ": ", what, " starts before its storage");
  return {handle, nullptr, SymmwinOperand{window, handle->get_offset() + (ptr - storage), len, 0, operand_dtype(t)}};
}

Bound bind_existing(const at::Tensor& t, const char* op, const char* what, size_t len) {
  TORCH_CHECK(t.defined(), "symmwin.", op, ": ", what, " is undefined");
  Bound found{};
  const auto status = find_window(t, kWorldGroup, len, &found);
  TORCH_CHECK(
      status != SYMMWIN_NOT_FOUND,
      "symmwin.",
      op,
      ": ",
      what,
      " has no window on the world group: it is not symmwin symmetric memory, or it "
      "was not rendezvoused yet (call symm_mem.rendezvous(tensor, dist.group.WORLD) on "
      "every rank first; a rendezvous is collective, a one-sided op cannot start one)");
  check_op(op, status);
  return found;
}

size_t bytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

Bound bind_sigpad(const Bound& data, const at::Tensor& sigpad, const char* op) {
  const SymmwinWindow* window = data.operand.window;
  size_t offset = 0;
  const auto status = symmwin_window_pad_offset(window, sigpad.data_ptr(), bytes(sigpad), &offset);
  if (status == SYMMWIN_NOT_FOUND) {
    return bind_existing(sigpad, op, "sigpad", bytes(sigpad));
  }
  check_op(op, status);
  return {data.handle, data.owned, SymmwinOperand{window, offset, bytes(sigpad), 1, operand_dtype(sigpad)}};
}

SymmwinWindow* window_of_handle(const Handle& hdl, const char* op) {
  SymmwinWindow* w = hdl ? symmwin_torch::window_of(hdl) : nullptr;
  TORCH_CHECK(w != nullptr, "symmwin.", op, ": hdl is not a symmwin handle");
  return w;
}

} // namespace symmwin_torch
