// The CPU and CUDA kernels of torch.ops.symmwin.*: each binds every tensor to its
// window and byte offset after the checks of ops_checks.cpp, and calls the C ABI; the
// core checks every range again and runs the op on the window's provider.

#include "ops_kernels.h"

#include "cuda_stream.h"
#include "errors.h"
#include "groups.h"
#include "interrupts.h"
#include "ops_checks.h"
#include "ops_operands.h"

#include <symmwin.h>

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace symmwin_torch;

// ---------------------------------------------------------------------------
// The all-to-all-v family.

void all_to_all_v(const char* op, const VarShape& v, const VarTensors& t, const std::string& group) {
  check_var(op, v, t);
  const auto bind = [&](const at::Tensor& tensor, const char* what) {
    return bind_tensor(tensor, {op, group}, what, bytes(tensor));
  };
  const auto in = bind(t.input, "input");
  const auto o = bind(t.out, "out");
  const auto s = bind(t.splits, v.splits_name());
  const auto so = bind(t.out_splits_offsets, "out_splits_offsets");
  const auto opts = options_for(t.input);
  const auto row_bytes = static_cast<size_t>(t.input.stride(0)) * t.input.element_size();
  const auto in_rows = static_cast<size_t>(t.input.size(0));
  const auto out_rows = static_cast<size_t>(t.out.size(0));
  check_op(op, without_gil([&] {
          return symmwin_op_all_to_all_v(v.shape, v.major_align, in.operand, o.operand, s.operand,
                                         so.operand, row_bytes, in_rows, out_rows, &opts);
        }));
}

void all_to_all_vdev(const at::Tensor& input, const at::Tensor& out, const at::Tensor& in_splits,
                     const at::Tensor& out_splits_offsets, std::string group_name) {
  all_to_all_v("all_to_all_vdev", {SYMMWIN_A2A_FLAT, 1},
               {input, out, in_splits, out_splits_offsets}, group_name);
}

void all_to_all_vdev_2d(const at::Tensor& input, const at::Tensor& out,
                        const at::Tensor& in_splits, const at::Tensor& out_splits_offsets,
                        std::string group_name, std::optional<int64_t> major_align) {
  all_to_all_v("all_to_all_vdev_2d", {SYMMWIN_A2A_DISPATCH, major_align.value_or(1)},
               {input, out, in_splits, out_splits_offsets}, group_name);
}

void all_to_all_vdev_2d_offset(const at::Tensor& input, const at::Tensor& out,
                               const at::Tensor& in_splits_offsets,
                               const at::Tensor& out_splits_offsets, std::string group_name) {
  all_to_all_v("all_to_all_vdev_2d_offset", {SYMMWIN_A2A_COMBINE, 0},
               {input, out, in_splits_offsets, out_splits_offsets}, group_name);
}

// ---------------------------------------------------------------------------
// Ops whose sizes the host knows.

void all_to_all_into(const at::Tensor& input, const at::Tensor& out, std::string group_name) {
  check_all_to_all(input, out);
  const auto in = bind_tensor(input, {"all_to_all", group_name}, "input", bytes(input));
  const auto o = bind_tensor(out, {"all_to_all", group_name}, "out", bytes(out));
  const auto opts = options_for(input);
  // The core splits elements, not bytes, among the ranks.
  const auto elem_size = static_cast<size_t>(input.element_size());
  check_op("all_to_all", without_gil([&] { return symmwin_op_all_to_all(in.operand, o.operand, elem_size, &opts); }));
}

at::Tensor all_to_all(const at::Tensor& input, at::Tensor out, std::string group_name) {
  all_to_all_into(input, out, std::move(group_name));
  return out;
}

void broadcast_into(const at::Tensor& input, int64_t root, std::string group_name) {
  require_contiguous("broadcast", input, "input");
  const auto b = bind_tensor(input, {"broadcast", group_name}, "input", bytes(input));
  const auto opts = options_for(input);
  // Ranks cross the C ABI at their full 64 bits: the core range-checks them.
  check_op("broadcast", without_gil([&] { return symmwin_op_broadcast(b.operand, root, &opts); }));
}

at::Tensor broadcast(at::Tensor input, int64_t root, std::string group_name) {
  broadcast_into(input, root, std::move(group_name));
  return input;
}

void put_get(const char* op, const at::Tensor& tensor, int64_t peer, bool into_peer) {
  require_contiguous(op, tensor, "tensor");
  const auto b = bind_existing(tensor, op, "tensor", bytes(tensor));
  const auto opts = options_for(tensor);
  check_op(op, without_gil([&] { return symmwin_op_put_get(b.operand, peer, into_peer ? 1 : 0, &opts); }));
}

void put(const at::Tensor& tensor, int64_t peer) {
  put_get("put", tensor, peer, true);
}

void get(const at::Tensor& tensor, int64_t peer) {
  put_get("get", tensor, peer, false);
}

// ---------------------------------------------------------------------------
// Signals.

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
  check_op(
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
  check_op(
      op,
      without_gil([&] { return symmwin_op_wait_for_signal(
          sigpad.data_ptr(), kWorldGroup, device, static_cast<uint64_t>(signal), peer, &opts); }));
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
  const SymmwinOperand dst{w, hdl->get_offset(), bytes(src), 0, operand_dtype(src)};
  const auto opts = options_for(src);
  check_op(
      op,
      without_gil([&] { return symmwin_op_put_signal(src.data_ptr(), bytes(src), dst, peer, &opts); }));
}

// ---------------------------------------------------------------------------
// Tile reduce.

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
    bound.push_back(bind_tensor(t, {op, group}, "in_tile", extent));
    ins.push_back(bound.back().operand);
  }
  const auto o = bind_tensor(out_tile, {op, group}, "out_tile", extent);
  const auto opts = options_for(out_tile);
  check_op(op, without_gil([&] {
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

} // namespace

void symmwin_torch::wait_signal(const Handle& hdl, int64_t peer) {
  SymmwinWindow* w = window_of_handle(hdl, "wait_signal");
  SymmwinOpOptions opts{};
  opts.stream = hdl->get_device().is_cuda() ? cuda_stream(hdl->get_device()) : nullptr;
  check_op("wait_signal", without_gil([&] { return symmwin_op_wait_signal(w, peer, &opts); }));
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
