// Checks of torch.ops.symmwin.* arguments before any memory is touched: the Meta
// kernels run them too, so torch.compile reports a bad call while tracing.

#include "ops_checks.h"

#include <symmwin.h>

#include <c10/util/Exception.h>

#include <utility>

namespace symmwin_torch {

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

namespace {

// ---------------------------------------------------------------------------
// The all-to-all-v family.

// Every operand on input's device and contiguous.
void check_var_placement(const char* op, const char* splits_name, const VarTensors& t) {
  for (auto [tensor, what] : {std::pair{&t.out, "out"},
                              std::pair{&t.splits, splits_name},
                              std::pair{&t.out_splits_offsets, "out_splits_offsets"}}) {
    require_device(op, *tensor, t.input, what);
  }
  for (auto [tensor, what] : {std::pair{&t.input, "input"},
                              std::pair{&t.out, "out"},
                              std::pair{&t.splits, splits_name},
                              std::pair{&t.out_splits_offsets, "out_splits_offsets"}}) {
    require_contiguous(op, *tensor, what);
  }
}

// Rows of the same dtype and stride in input and out; int64 split tables.
void check_var_types(const char* op, const VarTensors& t) {
  const auto& [input, out, splits, out_splits_offsets] = t;
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

} // namespace

void check_var(const char* op, const VarShape& v, const VarTensors& t) {
  check_var_placement(op, v.splits_name(), t);
  check_var_types(op, t);
  check_var_tables(op, v, t.splits, t.out_splits_offsets);
  // major_align and the tables' lengths (which depend on the group) are the core's.
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

} // namespace symmwin_torch
