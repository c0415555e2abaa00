// SymmwinSymmetricMemory: torch's SymmetricMemory interface over one of the core's
// windows. Every pointer, table and signal is the core's; the handle holds the
// window and refuses what torch's own kernels cannot do with it.

#include "handle.h"

#include "cuda_stream.h"
#include "errors.h"
#include "interrupts.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <vector>

namespace {

namespace py = pybind11;
namespace sm = c10d::symmetric_memory;
using symmwin_torch::check;
using symmwin_torch::cuda_stream;
using symmwin_torch::without_gil;

struct WindowRelease {
  void operator()(SymmwinWindow* w) const {
    // At interpreter exit torch's registries are torn down in no fixed order
    // relative to ours; the process is ending, so leave the mapping alone.
    if (!sm::is_finalizing()) {
      symmwin_window_release(w);
    }
  }
};

class SymmwinSymmetricMemory final : public sm::SymmetricMemory {
 public:
  explicit SymmwinSymmetricMemory(SymmwinWindow* window)
      : window_(window), device_(c10::DeviceType::CPU) {
    check(symmwin_window_info(window_.get(), &info_));
    if (info_.device >= 0) {
      device_ = c10::Device(
          c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(info_.device));
    }
    buffers_.reserve(info_.world);
    pads_.reserve(info_.world);
    mapped_.resize(info_.world);
    check(symmwin_window_mapped(window_.get(), mapped_.data(), mapped_.size()));
    for (int r = 0; r < info_.world; ++r) {
      // The core's pointers: null for peers that are not mapped (another host), as
      // torch's contract wants.
      buffers_.push_back(peer_ptr(SYMMWIN_BUFFER_PTRS, r));
      pads_.push_back(peer_ptr(SYMMWIN_PAD_PTRS, r));
    }
    global_ranks_.resize(info_.world);
    check(symmwin_window_global_ranks(
        window_.get(), global_ranks_.data(), global_ranks_.size()));
  }

  const SymmwinWindowInfo& info() const {
    return info_;
  }

  // Ranks whose memory is mapped here, in rank order.
  std::vector<int> direct_peers() const {
    std::vector<int> peers;
    for (int r = 0; r < info_.world; ++r) {
      if (mapped_[r]) {
        peers.push_back(r);
      }
    }
    return peers;
  }

  SymmwinWindow* window() const {
    return window_.get();
  }

  std::vector<void*> get_buffer_ptrs() override {
    return buffers_;
  }

  std::vector<void*> get_signal_pad_ptrs() override {
    return pads_;
  }

  // torch's own kernels (one_shot_all_reduce, two_shot_all_reduce_, reduce_scatter_out)
  // take these tables without checking world_within_direct_access() and would fault
  // on the null entries of a group that spans hosts: refuse them with a clear error.
  void** get_buffer_ptrs_dev() override {
    require_all_mapped("buffer_ptrs_dev");
    return static_cast<void**>(table(SYMMWIN_BUFFER_PTRS));
  }

  void** get_signal_pad_ptrs_dev() override {
    require_all_mapped("signal_pad_ptrs_dev");
    return static_cast<void**>(table(SYMMWIN_PAD_PTRS));
  }

  size_t get_buffer_size() override {
    return info_.size;
  }

  size_t get_offset() override {
    return info_.offset;
  }

  bool has_multicast_support() override {
    return false;
  }

  void* get_multicast_ptr() override {
    return nullptr;
  }

  void barrier(int channel, size_t timeout_ms) override {
    check(without_gil([&] {
      return symmwin_window_signal(
          window_.get(), SYMMWIN_SIGNAL_BARRIER, 0, channel, timeout_ms, stream());
    }));
  }

  void put_signal(int dst_rank, int channel, size_t timeout_ms) override {
    check(without_gil([&] {
      return symmwin_window_signal(
          window_.get(), SYMMWIN_SIGNAL_PUT, dst_rank, channel, timeout_ms, stream());
    }));
  }

  void wait_signal(int src_rank, int channel, size_t timeout_ms) override {
    check(without_gil([&] {
      return symmwin_window_signal(
          window_.get(), SYMMWIN_SIGNAL_WAIT, src_rank, channel, timeout_ms, stream());
    }));
  }

  int get_rank() override {
    return info_.rank;
  }

  int get_world_size() override {
    return info_.world;
  }

  c10::Device get_device() override {
    return device_;
  }

  const std::vector<int>& get_rank_to_global_rank() override {
    return global_ranks_;
  }

  int* get_rank_to_global_rank_dev() override {
    return static_cast<int*>(table(SYMMWIN_GLOBAL_RANKS));
  }

  bool world_within_direct_access() override {
    return std::all_of(mapped_.begin(), mapped_.end(), [](uint8_t m) { return m != 0; });
  }

 private:
  // Rank `rank`'s buffer or signal pad (`what`), as the core computes it.
  void* peer_ptr(int what, int rank) {
    void* ptr = nullptr;
    check(symmwin_window_peer_ptr(window_.get(), what, rank, &ptr));
    return ptr;
  }

  void require_all_mapped(const char* what) {
    if (world_within_direct_access()) {
      return;
    }
    std::ostringstream unmapped;
    for (int r = 0; r < info_.world; ++r) {
      if (!mapped_[r]) {
        unmapped << (unmapped.tellp() > 0 ? ", " : "") << r;
      }
    }
    TORCH_CHECK(
        false,
        "symmwin rank ",
        info_.rank,
        ": ",
        what,
        " is only served when every peer is mapped; rank(s) [",
        unmapped.str(),
        "] are on another host (world_within_direct_access() is false). torch's "
        "one_shot_all_reduce, two_shot_all_reduce_ and reduce_scatter_out need every "
        "peer mapped; see symmwin.direct_peers(hdl) and docs/multi-node.md.");
  }

  void* table(int which) {
    void* ptr = nullptr;
    check(symmwin_window_table_dev(window_.get(), which, &ptr));
    return ptr;
  }

  void* stream() {
    return device_.is_cuda() ? cuda_stream(device_) : nullptr;
  }

  std::unique_ptr<SymmwinWindow, WindowRelease> window_;
  SymmwinWindowInfo info_{};
  c10::Device device_;
  std::vector<void*> buffers_;
  std::vector<void*> pads_;
  std::vector<uint8_t> mapped_;
  std::vector<int> global_ranks_;
};

} // namespace

SymmwinWindow* symmwin_torch::window_of(
    const c10::intrusive_ptr<sm::SymmetricMemory>& handle) {
  auto* ours = dynamic_cast<SymmwinSymmetricMemory*>(handle.get());
  return ours == nullptr ? nullptr : ours->window();
}

c10::intrusive_ptr<sm::SymmetricMemory> symmwin_torch::make_handle(SymmwinWindow* window) {
  return c10::make_intrusive<SymmwinSymmetricMemory>(window);
}

py::tuple symmwin_torch::flat_layout(sm::SymmetricMemory& handle) {
  if (auto* ours = dynamic_cast<SymmwinSymmetricMemory*>(&handle)) {
    // The core's layout (rank 0 may be on another host, a null pointer: the span is
    // still reserved). Nothing to check: our buffer pointers are the core's.
    return py::make_tuple(ours->info().base, ours->info().stride);
  }
  // Another backend's handle: the core checks that its pointers are one span.
  const auto ptrs = handle.get_buffer_ptrs();
  uintptr_t base = 0;
  uintptr_t stride = 0;
  const auto status = symmwin_flat_layout(
      const_cast<const void* const*>(ptrs.data()), ptrs.size(), &base, &stride);
  if (status == SYMMWIN_INVALID_ARGUMENT) {
    throw py::value_error(symmwin_last_error());
  }
  check(status);
  return py::make_tuple(base, stride);
}

std::vector<int> symmwin_torch::direct_peers(sm::SymmetricMemory& handle) {
  if (auto* ours = dynamic_cast<SymmwinSymmetricMemory*>(&handle)) {
    return ours->direct_peers();
  }
  std::vector<int> peers;
  const auto ptrs = handle.get_buffer_ptrs();
  for (size_t r = 0; r < ptrs.size(); ++r) {
    if (ptrs[r] != nullptr) {
      peers.push_back(static_cast<int>(r));
    }
  }
  return peers;
}
