// The checks of torch.ops.symmwin.* arguments that need no memory (what the core
// cannot see: dtypes, shapes, devices, contiguity), shared by the real and the Meta
// kernels.
#pragma once

#include <symmwin.h>

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

void require_contiguous(const char* op, const at::Tensor& t, const char* what);

void require_device(
    const char* op,
    const at::Tensor& t,
    const at::Tensor& first,
    const char* what);

// The layout of an all-to-all-v (SYMMWIN_A2A_FLAT, _DISPATCH or _COMBINE) and its
// major_align.
struct VarShape {
  int shape;
  int64_t major_align;

  // torch's name of the split table the caller passes: in_splits, or
  // in_splits_offsets for the combine shape.
  const char* splits_name() const {
    return shape == SYMMWIN_A2A_COMBINE ? "in_splits_offsets" : "in_splits";
  }
};

// The tensors of an all-to-all-v call: `splits` is in_splits (in_splits_offsets for
// the combine shape).
struct VarTensors {
  const at::Tensor& input;
  const at::Tensor& out;
  const at::Tensor& splits;
  const at::Tensor& out_splits_offsets;
};

// Checks shared by the real and the Meta kernels.
void check_var(const char* op, const VarShape& v, const VarTensors& t);

void check_all_to_all(const at::Tensor& input, const at::Tensor& out);

// The C ABI's element code of a tile's dtype (SYMMWIN_ELEM_*).
int elem_code(const at::Tensor& t);

// Bytes from a tile's first element to one past its last.
size_t tile_extent(const at::Tensor& t);

void check_tile(const char* op, const at::Tensor& tile, const at::Tensor& out, const char* what);

#pragma GCC visibility pop

} // namespace symmwin_torch
