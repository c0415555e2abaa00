// SymmwinAllocator: torch's SymmetricMemoryAllocator over the core's allocations, for
// CUDA memory ("SYMMWIN") and host memory ("SYMMWIN_HOST"), and their registration with
// torch (`symm_mem.set_backend`).

#include "allocator.h"

#include "errors.h"
#include "groups.h"
#include "handle.h"
#include "interrupts.h"

#include <symmwin.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace {

namespace sm = c10d::symmetric_memory;
using symmwin_torch::check;
using symmwin_torch::ensure_group;
using symmwin_torch::kWorldGroup;
using symmwin_torch::without_gil;

class SymmwinAllocator final : public sm::SymmetricMemoryAllocator {
 public:
  SymmwinAllocator(c10::DeviceType type, std::string name)
      : type_(type), name_(std::move(name)) {}

  void* alloc(
      size_t size,
      int device_idx,
      const std::optional<std::string>& group_name) override {
    void* ptr = nullptr;
    // The core remembers the group (rendezvous below asks it when torch passes none).
    check(symmwin_alloc_for_group(
        symmwin_device(device_idx), size, group_name ? group_name->c_str() : nullptr, &ptr));
    return ptr;
  }

  void free(void* ptr) override {
    // torch's registry may outlive the core's state at exit.
    if (sm::is_finalizing()) {
      return;
    }
    // Called from tensor deleters, which must not throw.
    if (symmwin_free(ptr) != SYMMWIN_OK) {
      TORCH_WARN("symmwin: free failed: ", symmwin_last_error());
    }
  }

  size_t get_alloc_size(void* ptr) override {
    size_t size = 0;
    const auto status = symmwin_alloc_size(ptr, &size);
    TORCH_CHECK(
        status != SYMMWIN_NOT_FOUND,
        "symmwin: ",
        ptr,
        " is not a symmwin allocation");
    check(status);
    return size;
  }

  c10::intrusive_ptr<sm::SymmetricMemory> rendezvous(
      void* ptr,
      const std::optional<std::string>& group_name) override {
    // torch calls rendezvous on every op (one_shot_all_reduce, ...). The core's
    // registry is the one window cache: a repeat is not collective there, and a
    // concurrent first call waits for the one in flight.
    // The core finds the allocation covering `ptr` (torch's MemPool hands out
    // interior pointers); the group needs its device before the rendezvous.
    SymmwinAllocInfo alloc{};
    const auto found = symmwin_alloc_info(ptr, &alloc);
    if (found == SYMMWIN_NOT_FOUND) {
      // Not ours: torch treats a null handle as "not symmetric". With a group, the
      // core counts the call (locally), so that peers that did rendezvous are told
      // which rank skipped instead of pairing with its next window.
      if (group_name) {
        note_foreign(*group_name, ptr);
      }
      return nullptr;
    }
    check(found);
    // torch passes no group when the tensor was allocated for one
    // (empty_strided_p2p(group_name=...) then rendezvous(tensor)).
    const std::string group = group_name ? *group_name : alloc_group(ptr);
    ensure_group(group, alloc.device);
    SymmwinWindow* window = nullptr;
    const auto status = without_gil([&] {
      return symmwin_rendezvous(
          ptr, group.c_str(), alloc.device, sm::get_signal_pad_size(), &window);
    });
    if (status == SYMMWIN_NOT_FOUND) {
      return nullptr;
    }
    check(status);
    return symmwin_torch::make_handle(window);
  }

  bool has_multicast_support(int /*device_idx*/) override {
    return false;
  }

  c10::DeviceType supported_device_type() override {
    return type_;
  }

  std::string name() override {
    return name_;
  }

 private:
  int symmwin_device(int device_idx) const {
    if (type_ == c10::DeviceType::CPU) {
      return -1;
    }
    if (device_idx >= 0) {
      return device_idx;
    }
    // device="cuda" without an index means the current device, as for torch.empty.
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
        ->getDevice()
        .index();
  }

  // Count a rendezvous on memory that is not ours on `group` (no store round trip).
  void note_foreign(const std::string& group, void* ptr) {
    const int device = symmwin_device(-1);
    ensure_group(group, device);
    SymmwinWindow* window = nullptr;
    const auto status = without_gil([&] {
      return symmwin_rendezvous(ptr, group.c_str(), device, sm::get_signal_pad_size(), &window);
    });
    if (status != SYMMWIN_NOT_FOUND) {
      check(status);
      symmwin_window_release(window); // Allocated meanwhile by another thread.
    }
  }

  // The group an allocation was made for, as the core recorded it; else torch's
  // default (the world group).
  static std::string alloc_group(void* ptr) {
    char name[256];
    const auto status = symmwin_alloc_group(ptr, name, sizeof(name));
    if (status == SYMMWIN_NOT_FOUND) {
      return kWorldGroup;
    }
    check(status);
    return name;
  }

  const c10::DeviceType type_;
  const std::string name_;
};

} // namespace

void symmwin_torch::register_backends() {
  // A library built from another version of the header (a stale prebuilt one) would
  // read every changed argument wrongly: refuse it at import.
  TORCH_CHECK(
      symmwin_abi_version() == SYMMWIN_ABI_VERSION,
      "symmwin: the native library has C ABI version ",
      symmwin_abi_version(),
      " but this extension was compiled against version ",
      SYMMWIN_ABI_VERSION,
      "; rebuild both from one checkout");
  // A bad SYMMWIN_* setting fails `import symmwin`, not the first rendezvous.
  check(symmwin_init());
  check(symmwin_set_interrupt_check(&python_signal_raised));
  static std::once_flag once;
  std::call_once(once, [] {
    // Immortal: torch's allocator registry is destroyed after this module's
    // statics, and windows may still call into their allocator until then. The
    // leaked reference keeps each object alive for the whole process.
    auto* cuda = c10::make_intrusive<SymmwinAllocator>(
                     c10::DeviceType::CUDA, "SYMMWIN")
                     .release();
    auto* host = c10::make_intrusive<SymmwinAllocator>(
                     c10::DeviceType::CPU, "SYMMWIN_HOST")
                     .release();
    sm::register_availability(
        "SYMMWIN", c10::intrusive_ptr<SymmwinAllocator>::reclaim_copy(cuda));
    sm::register_availability(
        "SYMMWIN_HOST", c10::intrusive_ptr<SymmwinAllocator>::reclaim_copy(host));
  });
}
