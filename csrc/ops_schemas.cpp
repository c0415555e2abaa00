// torch.ops.symmwin.*: torch 2.11's symmetric-memory ops (the MoE all-to-all-v
// family, all-to-all, broadcast, put/get, signals, tile reduce) on symmwin windows.
//
// Schemas are torch's own (`symm_mem::nvshmem_*` without the prefix), so switching is
// a change of namespace. The kernels for CPU and CUDA are in ops_kernels.cpp, the Meta
// kernels in ops_meta.cpp.

#include "ops_kernels.h"
#include "ops_operands.h"

#include <torch/library.h>

using symmwin_torch::get_engine;
using symmwin_torch::set_engine;
using symmwin_torch::wait_signal;

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
