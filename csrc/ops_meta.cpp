// The Meta kernels of torch.ops.symmwin.*, which make the ops traceable by
// torch.compile: the checks that need no memory, and the aliasing outputs.

#include "ops_checks.h"

#include <symmwin.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>

namespace {

using symmwin_torch::check_all_to_all;
using symmwin_torch::check_tile;
using symmwin_torch::check_var;
using Handle = c10::intrusive_ptr<c10d::symmetric_memory::SymmetricMemory>;

void meta_vdev(const at::Tensor& input, const at::Tensor& out, const at::Tensor& in_splits,
               const at::Tensor& out_splits_offsets, std::string) {
  check_var("all_to_all_vdev", {SYMMWIN_A2A_FLAT, 1}, {input, out, in_splits, out_splits_offsets});
}

void meta_vdev_2d(const at::Tensor& input, const at::Tensor& out, const at::Tensor& in_splits,
                  const at::Tensor& out_splits_offsets, std::string,
                  std::optional<int64_t> major_align) {
  check_var("all_to_all_vdev_2d", {SYMMWIN_A2A_DISPATCH, major_align.value_or(1)},
            {input, out, in_splits, out_splits_offsets});
}

void meta_vdev_2d_offset(const at::Tensor& input, const at::Tensor& out,
                         const at::Tensor& in_splits_offsets,
                         const at::Tensor& out_splits_offsets, std::string) {
  check_var("all_to_all_vdev_2d_offset", {SYMMWIN_A2A_COMBINE, 0},
            {input, out, in_splits_offsets, out_splits_offsets});
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
