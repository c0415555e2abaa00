// torch.ops.symmwin.*: torch 2.11's symmetric-memory ops (the MoE all-to-all-v
// family, all-to-all, broadcast, put/get, signals, tile reduce) on symmwin windows.
//
// Schemas are torch's own (`symm_mem::nvshmem_*` without the prefix), so switching is
// a change of namespace. Each kernel here only checks tensors (what the core cannot
// see: dtypes, shapes, devices, contiguity), binds every tensor to its window and
// byte offset, and calls the C ABI; the core checks every range again and runs the
// op on the window's provider. Meta kernels make the ops traceable by torch.compile.

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/library.h>

#include "symmwin_ops.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace sm = c10d::symmetric_memory;
using symmwin_torch::without_gil;
using Handle = c10::intrusive_ptr<sm::SymmetricMemory>;

// put/get/put_with_signal name no group: as in torch, peers are world ranks.
constexpr const char* kWorldGroup = "0";

// Engine of SymmwinOpOptions for ops on this thread: the one place this setting lives
// (torch.ops.symmwin._set_engine / _get_engine; symmwin.ops names the codes).
thread_local int64_t engine_override = SYMMWIN_ENGINE_DEFAULT;

// The backend's error translation: symmwin's own timeouts (and every call after a
// device wait trapped) raise symmwin.TimeoutError, any other failure a RuntimeError.
void check(const char* op, SymmwinStatus status) {
  symmwin_torch::check_op(op, status);
}

SymmwinOpOptions options_for(const at::Tensor& t) {
  SymmwinOpOptions o{};
  o.engine = static_cast<int>(engine_override);
  o.timeout_ms = 0;
  o.stream = t.is_cuda() ? c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                               ->getStream(t.device())
                               .native_handle()
                         : nullptr;
  return o;
}

// A tensor bound to its window; `handle` or `owned` keeps the window alive for the call.
struct Bound {
  Handle handle;
  std::shared_ptr<SymmwinWindow> owned;
  SymmwinOperand operand;
};

Bound bind_tensor(
    const at::Tensor& t,
    const std::string& group,
    const char* op,
    const char* what,
    size_t len) {
  TORCH_CHECK(t.defined(), "symmwin.", op, ": ", what, " is undefined");
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
  return {handle, nullptr, SymmwinOperand{window, handle->get_offset() + (ptr - storage), len, 0}};
}

// For one-sided ops: the window the tensor already has on the world group. A
// rendezvous is collective, and a one-sided op is called by one rank only, so it must
// never start one (torch's own tests rendezvous before put/get).
Bound bind_existing(const at::Tensor& t, const char* op, const char* what, size_t len) {
  TORCH_CHECK(t.defined(), "symmwin.", op, ": ", what, " is undefined");
  SymmwinWindow* window = nullptr;
  size_t offset = 0;
  const int device = t.is_cuda() ? t.device().index() : -1; // -1: the host provider
  const auto status =
      symmwin_window_existing(t.data_ptr(), kWorldGroup, device, &window, &offset);
  TORCH_CHECK(
      status != SYMMWIN_NOT_FOUND,
      "symmwin.",
      op,
      ": ",
      what,
      " has no window on the world group: it is not symmwin symmetric memory, or it "
      "was not rendezvoused yet (call symm_mem.rendezvous(tensor, dist.group.WORLD) on "
      "every rank first; a rendezvous is collective, a one-sided op cannot start one)");
  check(op, status);
  std::shared_ptr<SymmwinWindow> owned(window, [](SymmwinWindow* w) { symmwin_window_release(w); });
  return {Handle(), owned, SymmwinOperand{window, offset, len, 0}};
}

size_t bytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

void require_contiguous(const char* op, const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_contiguous(), "symmwin.", op, ": ", what, " must be contiguous");
}

void require_device(
    const char* op,
    const at::Tensor& t,
    const at::Tensor& first,
    const char* what) {
  TORCH_CHECK(
      t.device() == first.device(),
      "symmwin.",
      op,
      ": ",
      what,
      " is on ",
      t.device(),
      " but the op's first tensor is on ",
      first.device());
}

// ---------------------------------------------------------------------------
// The all-to-all-v family.

struct VarShape {
  int shape;
  int64_t major_align;
};

// Every operand on input's device and contiguous.
void check_var_placement(
    const char* op,
    const char* splits_name,
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& splits,
    const at::Tensor& out_splits_offsets) {
  for (auto [t, what] : {std::pair{&out, "out"},
                         std::pair{&splits, splits_name},
                         std::pair{&out_splits_offsets, "out_splits_offsets"}}) {
    require_device(op, *t, input, what);
  }
  for (auto [t, what] : {std::pair{&input, "input"},
                         std::pair{&out, "out"},
                         std::pair{&splits, splits_name},
                         std::pair{&out_splits_offsets, "out_splits_offsets"}}) {
    require_contiguous(op, *t, what);
  }
}

// Rows of the same dtype and stride in input and out; int64 split tables.
void check_var_types(
    const char* op,
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& splits,
    const at::Tensor& out_splits_offsets) {
  TORCH_CHECK(
      input.dim() >= 1 && out.dim() >= 1,
      "symmwin.",
      op,
      ": input and out need at least one dimension");
  TORCH_CHECK(
      input.dtype() == out.dtype() && input.stride(0) == out.stride(0),
      "symmwin.",
      op,
      ": input and out must have the same dtype and the same stride at dim 0 (",
      input.dtype(),
      " stride ",
      input.stride(0),
      " vs ",
      out.dtype(),
      " stride ",
      out.stride(0),
      ")");
  TORCH_CHECK(
      splits.scalar_type() == at::kLong &&
          out_splits_offsets.scalar_type() == at::kLong,
      "symmwin.",
      op,
      ": splits and offsets must be int64, not ",
      splits.scalar_type(),
      " and ",
      out_splits_offsets.scalar_type());
}

// The split tables' shapes: in_splits 1-D (in_splits_offsets [2, n] for combine),
// out_splits_offsets [2, m]. Their lengths depend on the group size, which only the
// core knows: it checks in_splits first and derives out_splits_offsets' length from
// it, so a wrong in_splits is blamed on in_splits.
void check_var_tables(
    const char* op,
    const VarShape& v,
    const at::Tensor& splits,
    const at::Tensor& out_splits_offsets) {
  if (v.shape == SYMMWIN_A2A_COMBINE) {
    TORCH_CHECK(
        splits.dim() == 2 && splits.size(0) == 2,
        "symmwin.",
        op,
        ": in_splits_offsets must be 2-D with 2 rows, not of shape ",
        splits.sizes());
  } else {
    TORCH_CHECK(
        splits.dim() == 1,
        "symmwin.",
        op,
        ": in_splits must be 1-D, not of shape ",
        splits.sizes());
  }
  TORCH_CHECK(
      out_splits_offsets.dim() == 2 && out_splits_offsets.size(0) == 2,
      "symmwin.",
      op,
      ": out_splits_offsets must be 2-D with 2 rows, not of shape ",
      out_splits_offsets.sizes());
}

// Checks shared by the real and the Meta kernels.
void check_var(
    const char* op,
    const VarShape& v,
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& splits,
    const at::Tensor& out_splits_offsets) {
  const char* splits_name =
      v.shape == SYMMWIN_A2A_COMBINE ? "in_splits_offsets" : "in_splits";
  check_var_placement(op, splits_name, input, out, splits, out_splits_offsets);
  check_var_types(op, input, out, splits, out_splits_offsets);
  check_var_tables(op, v, splits, out_splits_offsets);
  // major_align and the tables' lengths (which depend on the group) are the core's.
}

void all_to_all_v(
    const char* op,
    const VarShape& v,
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& splits,
    const at::Tensor& out_splits_offsets,
    const std::string& group) {
  check_var(op, v, input, out, splits, out_splits_offsets);
  const auto in = bind_tensor(input, group, op, "input", bytes(input));
  const auto o = bind_tensor(out, group, op, "out", bytes(out));
  const auto s = bind_tensor(splits, group, op, "in_splits", bytes(splits));
  const auto so =
      bind_tensor(out_splits_offsets, group, op, "out_splits_offsets", bytes(out_splits_offsets));
  const auto opts = options_for(input);
  check(op, without_gil([&] {
          return symmwin_op_all_to_all_v(
              v.shape,
              v.major_align,
              in.operand,
              o.operand,
              s.operand,
              so.operand,
              static_cast<size_t>(input.stride(0)) * input.element_size(),
              static_cast<size_t>(input.size(0)),
              static_cast<size_t>(out.size(0)),
              &opts);
        }));
}

void all_to_all_vdev(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits,
    const at::Tensor& out_splits_offsets,
    std::string group_name) {
  all_to_all_v(
      "all_to_all_vdev",
      {SYMMWIN_A2A_FLAT, 1},
      input,
      out,
      in_splits,
      out_splits_offsets,
      group_name);
}

void all_to_all_vdev_2d(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits,
    const at::Tensor& out_splits_offsets,
    std::string group_name,
    std::optional<int64_t> major_align) {
  all_to_all_v(
      "all_to_all_vdev_2d",
      {SYMMWIN_A2A_DISPATCH, major_align.value_or(1)},
      input,
      out,
      in_splits,
      out_splits_offsets,
      group_name);
}

void all_to_all_vdev_2d_offset(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits_offsets,
    const at::Tensor& out_splits_offsets,
    std::string group_name) {
  all_to_all_v(
      "all_to_all_vdev_2d_offset",
      {SYMMWIN_A2A_COMBINE, 0},
      input,
      out,
      in_splits_offsets,
      out_splits_offsets,
      group_name);
}

// ---------------------------------------------------------------------------
// Ops whose sizes the host knows.

void check_all_to_all(const at::Tensor& input, const at::Tensor& out) {
  const char* op = "all_to_all";
  require_device(op, out, input, "out");
  require_contiguous(op, input, "input");
  require_contiguous(op, out, "out");
  TORCH_CHECK(
      input.dtype() == out.dtype() && input.numel() == out.numel(),
      "symmwin.all_to_all: input and out must have the same dtype and numel (",
      input.dtype(),
      " x ",
      input.numel(),
      " vs ",
      out.dtype(),
      " x ",
      out.numel(),
      ")");
}

void all_to_all_into(const at::Tensor& input, const at::Tensor& out, std::string group_name) {
  check_all_to_all(input, out);
  const auto in = bind_tensor(input, group_name, "all_to_all", "input", bytes(input));
  const auto o = bind_tensor(out, group_name, "all_to_all", "out", bytes(out));
  const auto opts = options_for(input);
  // The core splits elements, not bytes, among the ranks.
  const auto elem_size = static_cast<size_t>(input.element_size());
  check("all_to_all", without_gil([&] { return symmwin_op_all_to_all(in.operand, o.operand, elem_size, &opts); }));
}

at::Tensor all_to_all(const at::Tensor& input, at::Tensor out, std::string group_name) {
  all_to_all_into(input, out, std::move(group_name));
  return out;
}

void broadcast_into(const at::Tensor& input, int64_t root, std::string group_name) {
  require_contiguous("broadcast", input, "input");
  const auto b = bind_tensor(input, group_name, "broadcast", "input", bytes(input));
  const auto opts = options_for(input);
  // Ranks cross the C ABI at their full 64 bits: the core range-checks them.
  check("broadcast", without_gil([&] { return symmwin_op_broadcast(b.operand, root, &opts); }));
}

at::Tensor broadcast(at::Tensor input, int64_t root, std::string group_name) {
  broadcast_into(input, root, std::move(group_name));
  return input;
}

void put_get(const char* op, const at::Tensor& tensor, int64_t peer, bool into_peer) {
  require_contiguous(op, tensor, "tensor");
  const auto b = bind_existing(tensor, op, "tensor", bytes(tensor));
  const auto opts = options_for(tensor);
  check(op, without_gil([&] { return symmwin_op_put_get(b.operand, peer, into_peer ? 1 : 0, &opts); }));
}

void put(const at::Tensor& tensor, int64_t peer) {
  put_get("put", tensor, peer, true);
}

void get(const at::Tensor& tensor, int64_t peer) {
  put_get("get", tensor, peer, false);
}

// ---------------------------------------------------------------------------
// Signals.

// `sigpad` as an operand: inside the signal pad of `data`'s window (torch's tests
// pass `hdl.get_signal_pad(rank)`), or a symmetric tensor of its own.
Bound bind_sigpad(const Bound& data, const at::Tensor& sigpad, const char* op) {
  const SymmwinWindow* window = data.operand.window;
  size_t offset = 0;
  const auto status = symmwin_window_pad_offset(window, sigpad.data_ptr(), bytes(sigpad), &offset);
  if (status == SYMMWIN_NOT_FOUND) {
    return bind_existing(sigpad, op, "sigpad", bytes(sigpad));
  }
  check(op, status);
  return {data.handle, data.owned, SymmwinOperand{window, offset, bytes(sigpad), 1}};
}

void put_with_signal(
    const at::Tensor& tensor,
    const at::Tensor& sigpad,
    int64_t signal,
    int64_t peer) {
  const char* op = "put_with_signal";
  require_contiguous(op, tensor, "tensor");
  require_device(op, sigpad, tensor, "sigpad");
  const auto b = bind_existing(tensor, op, "tensor", bytes(tensor));
  const auto s = bind_sigpad(b, sigpad, op);
  const auto opts = options_for(tensor);
  check(
      op,
      without_gil([&] { return symmwin_op_put_with_signal(
          b.operand, s.operand, static_cast<uint64_t>(signal), peer, &opts); }));
}

void wait_for_signal(const at::Tensor& sigpad, int64_t signal, int64_t peer) {
  const char* op = "wait_for_signal";
  TORCH_CHECK(
      sigpad.defined() && bytes(sigpad) >= 8,
      "symmwin.wait_for_signal: sigpad must hold a 64-bit word");
  const auto opts = options_for(sigpad);
  const int device = sigpad.is_cuda() ? sigpad.device().index() : -1;
  // `peer` is a world rank; the core checks it and that the sigpad is symmetric
  // memory (an allocation or a signal pad) of the world group.
  check(
      op,
      without_gil([&] { return symmwin_op_wait_for_signal(
          sigpad.data_ptr(), kWorldGroup, device, static_cast<uint64_t>(signal), peer, &opts); }));
}

SymmwinWindow* window_of_handle(const Handle& hdl, const char* op) {
  SymmwinWindow* w = hdl ? symmwin_torch::window_of(hdl) : nullptr;
  TORCH_CHECK(w != nullptr, "symmwin.", op, ": hdl is not a symmwin handle");
  return w;
}

void put_signal(const at::Tensor& src, const Handle& hdl, int64_t peer) {
  const char* op = "put_signal";
  require_contiguous(op, src, "src");
  TORCH_CHECK(
      src.device() == hdl->get_device(),
      "symmwin.put_signal: src is on ",
      src.device(),
      " but hdl is on ",
      hdl->get_device());
  SymmwinWindow* w = window_of_handle(hdl, op);
  const SymmwinOperand dst{w, hdl->get_offset(), bytes(src), 0};
  const auto opts = options_for(src);
  check(
      op,
      without_gil([&] { return symmwin_op_put_signal(src.data_ptr(), bytes(src), dst, peer, &opts); }));
}

void wait_signal(const Handle& hdl, int64_t peer) {
  SymmwinWindow* w = window_of_handle(hdl, "wait_signal");
  SymmwinOpOptions opts{};
  opts.stream = hdl->get_device().is_cuda()
      ? c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
            ->getStream(hdl->get_device())
            .native_handle()
      : nullptr;
  check("wait_signal", without_gil([&] { return symmwin_op_wait_signal(w, peer, &opts); }));
}

// ---------------------------------------------------------------------------
// Tile reduce.

int elem_code(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return SYMMWIN_ELEM_F32;
    case at::kDouble:
      return SYMMWIN_ELEM_F64;
    case at::kHalf:
      return SYMMWIN_ELEM_F16;
    case at::kBFloat16:
      return SYMMWIN_ELEM_BF16;
    default:
      TORCH_CHECK(
          false,
          "symmwin.tile_reduce: tiles must be float32, float64, float16 or bfloat16, not ",
          t.scalar_type());
  }
}

// Bytes from a tile's first element to one past its last.
size_t tile_extent(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0;
  }
  return static_cast<size_t>((t.size(0) - 1) * t.stride(0) + t.size(1)) * t.element_size();
}

void check_tile(const char* op, const at::Tensor& tile, const at::Tensor& out, const char* what) {
  require_device(op, tile, out, what);
  TORCH_CHECK(
      tile.dim() == 2 && out.dim() == 2,
      "symmwin.",
      op,
      ": tiles must be 2-D (",
      what,
      " is ",
      tile.dim(),
      "-D)");
  TORCH_CHECK(
      tile.dtype() == out.dtype() && tile.sizes() == out.sizes() &&
          tile.strides() == out.strides(),
      "symmwin.",
      op,
      ": ",
      what,
      " and out_tile must have the same dtype, sizes and strides");
  TORCH_CHECK(
      tile.size(1) <= 1 || tile.stride(1) == 1,
      "symmwin.",
      op,
      ": tiles need a unit inner stride (",
      what,
      " has strides ",
      tile.strides(),
      ")");
  elem_code(tile);
}

void reduce_tiles(
    const char* op,
    const std::vector<at::Tensor>& tiles,
    const at::Tensor& out_tile,
    const std::vector<int64_t>& roots,
    const std::string& group,
    const std::string& reduce_op) {
  TORCH_CHECK(reduce_op == "sum", "symmwin.", op, ": only \"sum\" is supported, not ", reduce_op);
  TORCH_CHECK(
      !tiles.empty() && tiles.size() == roots.size(),
      "symmwin.",
      op,
      ": one root per tile (",
      tiles.size(),
      " tiles, ",
      roots.size(),
      " roots)");
  for (const auto& t : tiles) {
    check_tile(op, t, out_tile, "in_tile");
  }
  const size_t extent = tile_extent(out_tile);
  std::vector<Bound> bound;
  std::vector<SymmwinOperand> ins;
  for (const auto& t : tiles) {
    bound.push_back(bind_tensor(t, group, op, "in_tile", extent));
    ins.push_back(bound.back().operand);
  }
  const auto o = bind_tensor(out_tile, group, op, "out_tile", extent);
  const auto opts = options_for(out_tile);
  check(op, without_gil([&] {
          return symmwin_op_tile_reduce(
              ins.data(),
              ins.size(),
              roots.data(),
              o.operand,
              static_cast<size_t>(out_tile.size(0)),
              static_cast<size_t>(out_tile.size(1)),
              static_cast<size_t>(out_tile.stride(0)),
              elem_code(out_tile),
              reduce_op.c_str(),
              &opts);
        }));
}

void tile_reduce(
    const at::Tensor& in_tile,
    const at::Tensor& out_tile,
    int64_t root,
    std::string group_name,
    std::string reduce_op) {
  reduce_tiles("tile_reduce", {in_tile}, out_tile, {root}, group_name, reduce_op);
}

void multi_root_tile_reduce(
    at::TensorList in_tiles,
    const at::Tensor& out_tile,
    at::IntArrayRef roots,
    std::string group_name,
    std::string reduce_op) {
  reduce_tiles(
      "multi_root_tile_reduce",
      in_tiles.vec(),
      out_tile,
      roots.vec(),
      group_name,
      reduce_op);
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

// ---------------------------------------------------------------------------
// Meta kernels: the checks that need no memory, and the aliasing outputs.

void meta_vdev(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits,
    const at::Tensor& out_splits_offsets,
    std::string) {
  check_var("all_to_all_vdev", {SYMMWIN_A2A_FLAT, 1}, input, out, in_splits, out_splits_offsets);
}

void meta_vdev_2d(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits,
    const at::Tensor& out_splits_offsets,
    std::string,
    std::optional<int64_t> major_align) {
  check_var(
      "all_to_all_vdev_2d",
      {SYMMWIN_A2A_DISPATCH, major_align.value_or(1)},
      input,
      out,
      in_splits,
      out_splits_offsets);
}

void meta_vdev_2d_offset(
    const at::Tensor& input,
    const at::Tensor& out,
    const at::Tensor& in_splits_offsets,
    const at::Tensor& out_splits_offsets,
    std::string) {
  check_var(
      "all_to_all_vdev_2d_offset",
      {SYMMWIN_A2A_COMBINE, 0},
      input,
      out,
      in_splits_offsets,
      out_splits_offsets);
}

at::Tensor meta_all_to_all(const at::Tensor& input, at::Tensor out, std::string) {
  check_all_to_all(input, out);
  return out;
}

void meta_all_to_all_into(const at::Tensor& input, const at::Tensor& out, std::string) {
  check_all_to_all(input, out);
}

at::Tensor meta_broadcast(at::Tensor input, int64_t, std::string) {
  return input;
}

void meta_nothing_2(const at::Tensor&, int64_t) {}

void meta_broadcast_into(const at::Tensor&, int64_t, std::string) {}

void meta_put_with_signal(const at::Tensor&, const at::Tensor&, int64_t, int64_t) {}

void meta_wait_for_signal(const at::Tensor&, int64_t, int64_t) {}

void meta_put_signal(const at::Tensor&, const Handle&, int64_t) {}

void meta_tile_reduce(
    const at::Tensor& in_tile,
    const at::Tensor& out_tile,
    int64_t,
    std::string,
    std::string) {
  check_tile("tile_reduce", in_tile, out_tile, "in_tile");
}

void meta_multi_root_tile_reduce(
    at::TensorList in_tiles,
    const at::Tensor& out_tile,
    at::IntArrayRef roots,
    std::string,
    std::string) {
  TORCH_CHECK(in_tiles.size() == roots.size(), "symmwin.multi_root_tile_reduce: one root per tile");
  for (const auto& t : in_tiles) {
    check_tile("multi_root_tile_reduce", t, out_tile, "in_tile");
  }
}

} // namespace

TORCH_LIBRARY(symmwin, m) {
  m.def(
      "all_to_all_vdev(Tensor input, Tensor(a!) out, Tensor in_splits, "
      "Tensor(a!) out_splits_offsets, str group_name) -> ()");
  m.def(
      "all_to_all_vdev_2d(Tensor input, Tensor(a!) out, Tensor in_splits, "
      "Tensor(a!) out_splits_offsets, str group_name, int? major_align=None) -> ()");
  m.def(
      "all_to_all_vdev_2d_offset(Tensor input, Tensor(a!) out, Tensor in_splits_offsets, "
      "Tensor(a!) out_splits_offsets, str group_name) -> ()");
  m.def("all_to_all(Tensor input, Tensor(a!) out, str group_name) -> Tensor(a!)");
  m.def("all_to_all_into(Tensor input, Tensor(a!) out, str group_name) -> ()");
  m.def("broadcast(Tensor(a!) input, int root, str group_name) -> Tensor(a!)");
  m.def("broadcast_into(Tensor(a!) input, int root, str group_name) -> ()");
  m.def("put(Tensor(a!) tensor, int peer) -> ()");
  m.def("get(Tensor(a!) tensor, int peer) -> ()");
  m.def(
      "tile_reduce(Tensor in_tile, Tensor(a!) out_tile, int root, str group_name, "
      "str reduce_op=\"sum\") -> ()");
  m.def(
      "multi_root_tile_reduce(Tensor[] in_tiles, Tensor(a!) out_tile, int[] roots, "
      "str group_name, str reduce_op=\"sum\") -> ()");
  m.def("put_with_signal(Tensor(a) tensor, Tensor(a) sigpad, int signal, int peer) -> ()");
  m.def("wait_for_signal(Tensor sigpad, int signal, int peer) -> ()");
  m.def(
      "put_signal(Tensor src, __torch__.torch.classes.c10d.SymmetricMemory hdl, int peer) -> ()");
  // No tensor argument: a catch-all kernel.
  m.def(
      "wait_signal(__torch__.torch.classes.c10d.SymmetricMemory hdl, int peer) -> ()",
      &wait_signal);
  m.def("_set_engine(int engine) -> ()", &set_engine);
  m.def("_get_engine() -> int", &get_engine);
}

#define SYMMWIN_OPS_IMPL(KEY)                                          \
  TORCH_LIBRARY_IMPL(symmwin, KEY, m) {                                \
    m.impl("all_to_all_vdev", &all_to_all_vdev);                       \
    m.impl("all_to_all_vdev_2d", &all_to_all_vdev_2d);                 \
    m.impl("all_to_all_vdev_2d_offset", &all_to_all_vdev_2d_offset);   \
    m.impl("all_to_all", &all_to_all);                                 \
    m.impl("all_to_all_into", &all_to_all_into);                       \
    m.impl("broadcast", &broadcast);                                   \
    m.impl("broadcast_into", &broadcast_into);                         \
    m.impl("put", &put);                                               \
    m.impl("get", &get);                                               \
    m.impl("tile_reduce", &tile_reduce);                               \
    m.impl("multi_root_tile_reduce", &multi_root_tile_reduce);         \
    m.impl("put_with_signal", &put_with_signal);                       \
    m.impl("wait_for_signal", &wait_for_signal);                       \
    m.impl("put_signal", &put_signal);                                 \
  }

SYMMWIN_OPS_IMPL(CPU)
SYMMWIN_OPS_IMPL(CUDA)

TORCH_LIBRARY_IMPL(symmwin, Meta, m) {
  m.impl("all_to_all_vdev", &meta_vdev);
  m.impl("all_to_all_vdev_2d", &meta_vdev_2d);
  m.impl("all_to_all_vdev_2d_offset", &meta_vdev_2d_offset);
  m.impl("all_to_all", &meta_all_to_all);
  m.impl("all_to_all_into", &meta_all_to_all_into);
  m.impl("broadcast", &meta_broadcast);
  m.impl("broadcast_into", &meta_broadcast_into);
  m.impl("put", &meta_nothing_2);
  m.impl("get", &meta_nothing_2);
  m.impl("tile_reduce", &meta_tile_reduce);
  m.impl("multi_root_tile_reduce", &meta_multi_root_tile_reduce);
  m.impl("put_with_signal", &meta_put_with_signal);
  m.impl("wait_for_signal", &meta_wait_for_signal);
  m.impl("put_signal", &meta_put_signal);
}
