// torch adapter for symmwin: a SymmetricMemoryAllocator / SymmetricMemory pair that
// forwards to the C ABI (crates/symmwin-capi), and the `symmwin._C` module.
//
// Compiled against the installed torch only (its SymmetricMemory interface changes
// every minor release). No CUDA header is included, so the same source builds on
// machines without a CUDA toolkit; the current CUDA stream comes through c10's
// device-generic stream interface instead.

#include <symmwin.h>

#include "symmwin_remote.h"
#include "symmwin_ops.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>
// Declares c10::intrusive_ptr as a pybind11 holder, so that torch's
// `_SymmetricMemory` objects convert to the C++ handle.
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace py = pybind11;
namespace sm = c10d::symmetric_memory;
using symmwin_torch::without_gil;

// torch's own default when no group is given (the world group's registered name).
constexpr const char* kWorldGroup = "0";

// symmwin's own timeouts (rendezvous, host-side waits, the report after a device
// wait timed out): `symmwin.TimeoutError` in Python, a torch DistBackendError.
struct SymmwinTimeoutError : c10::DistBackendError {
  using c10::DistBackendError::DistBackendError;
};

// The statuses that are symmwin's own timeouts: peers that did not come in time, and
// every call after a device wait timed out and trapped (the context is lost).
bool is_own_timeout(SymmwinStatus status) {
  return status == SYMMWIN_TIMEOUT || status == SYMMWIN_CONTEXT_LOST;
}

// A host wait the interpreter's signal handler interrupted (Ctrl-C): the handler
// already set its exception (KeyboardInterrupt), which goes up as it is.
[[noreturn]] void raise_interrupted(const std::string& message) {
  {
    py::gil_scoped_acquire gil;
    if (PyErr_Occurred()) {
      throw py::error_already_set();
    }
  }
  TORCH_CHECK(false, message);
}

// Every failure becomes a c10::Error (a RuntimeError in Python) carrying the
// core's message, which already starts with "symmwin".
void check(SymmwinStatus status) {
  if (status == SYMMWIN_OK) {
    return;
  }
  if (status == SYMMWIN_INTERRUPTED) {
    raise_interrupted(symmwin_last_error());
  }
  const std::string last = symmwin_last_error();
  const std::string message = last.empty()
      ? "symmwin: call failed with status " + std::to_string(static_cast<int>(status))
      : last;
  if (is_own_timeout(status)) {
    throw SymmwinTimeoutError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
  }
  TORCH_CHECK(false, message);
}

// The process group's own timeout (`init_process_group(timeout=...)`), in ms; 0 when
// its backend does not say. The world group's store carries the same timeout.
uint64_t timeout_ms_of(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  try {
    return static_cast<uint64_t>(
        pg->getDefaultBackend()->getBackendOptions()->timeout.count());
  } catch (const std::exception&) {
  }
  try {
    return static_cast<uint64_t>(pg->getStore()->getTimeout().count());
  } catch (const std::exception&) {
    return 0;
  }
}

// ---------------------------------------------------------------------------
// SymmwinStore over a c10d::Store. Rust may call these from any thread; no C++
// exception may unwind into it.

struct StoreRef {
  c10::intrusive_ptr<c10d::Store> store;
};

c10d::Store& store_of(void* ctx) {
  return *static_cast<StoreRef*>(ctx)->store;
}

// A c10d error that means the store's server is gone, not merely slow. A read of 0
// bytes is torch's "Failed to recv, got 0 bytes. Connection was likely closed".
bool server_gone(const std::string& what) {
  for (const char* sign :
       {"Connection reset",
        "Broken pipe",
        "Connection refused",
        "EOF",
        "Connection was likely closed"}) {
    if (what.find(sign) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The c10d exception is the useful half of a store failure (a socket timeout, a dead
// server): it goes back to the core in `error`, which adds it to its own message.
void report(SymmwinStoreError* error, const std::string& what) {
  std::string message = what;
  if (server_gone(what)) {
    message +=
        "; the store's server closed the connection: the process hosting it "
        "has died or exited";
  }
  std::snprintf(error->message, sizeof(error->message), "%s", message.c_str());
}

template <typename F>
int guarded(SymmwinStoreError* error, F&& f) noexcept {
  try {
    return f();
  } catch (const c10::Error& e) {
    report(error, e.what_without_backtrace());
  } catch (const std::exception& e) {
    report(error, e.what());
  } catch (...) {
    report(error, "unknown exception");
  }
  return -1;
}

int store_set(
    void* ctx,
    const char* key,
    const uint8_t* value,
    size_t len,
    SymmwinStoreError* error) {
  return guarded(error, [&] {
    store_of(ctx).set(key, std::vector<uint8_t>(value, value + len));
    return 0;
  });
}

int store_try_get(
    void* ctx,
    const char* key,
    SymmwinSink sink,
    void* sink_ctx,
    SymmwinStoreError* error) {
  return guarded(error, [&] {
    auto& store = store_of(ctx);
    // check() does not block; get() alone would wait for the key up to the
    // store timeout, and the core polls with its own deadline.
    if (!store.check({key})) {
      return 0;
    }
    auto value = store.get(key);
    sink(sink_ctx, value.data(), value.size());
    return 1;
  });
}

// A whole gather in two round trips whatever the world size: wait on every key,
// then fetch them all. A timeout (c10d throws) answers 0, and the core looks the keys
// up one by one to name the missing ranks; a broken store fails that lookup too.
int store_wait_all(
    void* ctx,
    const char* const* keys,
    size_t count,
    uint64_t timeout_ms,
    SymmwinSink sink,
    void* sink_ctx,
    SymmwinStoreError* error) {
  return guarded(error, [&] {
    std::vector<std::string> names(keys, keys + count);
    auto& store = store_of(ctx);
    try {
      store.wait(names, std::chrono::milliseconds(timeout_ms));
    } catch (...) {
      return 0;
    }
    auto values = store.multiGet(names);
    if (values.size() != count) {
      return -1;
    }
    for (auto& value : values) {
      sink(sink_ctx, value.data(), value.size());
    }
    return 1;
  });
}

int store_add(
    void* ctx,
    const char* key,
    int64_t delta,
    int64_t* out,
    SymmwinStoreError* error) {
  return guarded(error, [&] {
    *out = store_of(ctx).add(key, delta);
    return 0;
  });
}

int store_remove(void* ctx, const char* key, SymmwinStoreError* /*error*/) {
  try {
    store_of(ctx).deleteKey(key);
    return 0;
  } catch (...) {
    // No reason reported: deleting is cleanup, the core only warns, and some
    // stores (FileStore) cannot delete at all.
    return -1;
  }
}

void store_release(void* ctx) {
  // Dropping a c10d store reference does not throw in practice; if it ever did, it
  // must still not cross into Rust.
  try {
    delete static_cast<StoreRef*>(ctx);
  } catch (...) {
  }
}

// Who serves a process group's store, for errors when it stops answering. The
// TCPStore server runs in the process that created it: the one at MASTER_ADDR,
// global rank 0 unless the job set up the store itself.
std::string describe_store(const c10::intrusive_ptr<c10d::Store>& store) {
  c10d::Store* inner = store.get();
  c10::intrusive_ptr<c10d::Store> underlying;
  if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(inner)) {
    underlying = prefix->getUnderlyingNonPrefixStore();
    inner = underlying.get();
  }
  if (auto* tcp = dynamic_cast<c10d::TCPStore*>(inner)) {
    return "TCPStore at " + tcp->getHost() + ":" + std::to_string(tcp->getPort()) +
        ", served by the process that created it (usually global rank 0)";
  }
  return "c10d store";
}

// `describe` must outlive the call that passes the store to the core (it is copied).
SymmwinStore make_store(
    c10::intrusive_ptr<c10d::Store> store,
    const std::string& describe) {
  SymmwinStore s{};
  // The core holds the store while the group is registered, so its address cannot be
  // reused by another store in that time: it identifies the process group's store
  // (ensure_group compares it the same way).
  s.identity = reinterpret_cast<uintptr_t>(store.get());
  s.describe = describe.c_str();
  s.ctx = new StoreRef{std::move(store)};
  s.set = store_set;
  s.try_get = store_try_get;
  s.add = store_add;
  s.remove = store_remove;
  s.release = store_release;
  s.wait_all = store_wait_all;
  return s;
}

// Global rank of each group rank. torch keeps them only in the backend options
// (`global_ranks_in_group`, set by distributed_c10d for gloo and NCCL groups; empty
// for the default group, where they are the identity). Empty means identity.
std::vector<int> global_ranks_of(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  std::vector<uint64_t> ranks;
  try {
    ranks = pg->getDefaultBackend()->getBackendOptions()->global_ranks_in_group;
  } catch (const std::exception&) {
    TORCH_WARN_ONCE(
        "symmwin: the backend of group ",
        pg->getGroupName(),
        " does not report its global ranks; assuming group rank == global rank");
    return {};
  }
  if (ranks.size() != static_cast<size_t>(pg->getSize())) {
    return {};
  }
  return std::vector<int>(ranks.begin(), ranks.end());
}

// torch's process group `name`. torch's own error names no cause; the usual one is
// a process group destroyed (dist.destroy_process_group) while symmwin memory, a
// rendezvous or an op still uses it, so say so and what to do.
c10::intrusive_ptr<c10d::ProcessGroup> resolve_group(const std::string& name) {
  try {
    return c10d::resolve_process_group(name);
  } catch (const c10::Error& e) {
    TORCH_CHECK(
        false,
        e.what_without_backtrace(),
        "\nsymmwin: process group ",
        name,
        " is not registered with torch: was dist.destroy_process_group() called? "
        "Rendezvous and ops need the group alive; finish symmwin work before "
        "destroying it, or make it again with dist.init_process_group() and allocate "
        "new symmetric tensors (see docs/troubleshooting.md)");
  }
}

// Register the process group now known as `name` with the core. Every call: a name
// can be reused by a new process group once torch destroys the old one, and the
// core tells them apart by their store (a repeat for the same store is a no-op).
void ensure_group(const std::string& name, int device) {
  auto pg = resolve_group(name);
  auto store = pg->getStore();
  if (symmwin_group_matches(
          name.c_str(), device, reinterpret_cast<uintptr_t>(store.get()))) {
    return;
  }
  const std::string describe = describe_store(store);
  const auto globals = global_ranks_of(pg);
  check(symmwin_group_init(
      name.c_str(),
      device,
      pg->getRank(),
      pg->getSize(),
      globals.empty() ? nullptr : globals.data(),
      timeout_ms_of(pg),
      make_store(std::move(store), describe)));
  // Ranks the group's windows cannot map (other hosts) are reached through the
  // group's own process group.
  check(symmwin_group_set_remote(name.c_str(), device, symmwin_torch::make_remote(pg, device)));
}

void* cuda_stream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->getStream(device)
      .native_handle();
}

// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------

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
    return c10::make_intrusive<SymmwinSymmetricMemory>(window);
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

// ---------------------------------------------------------------------------

// The thread that imported symmwin: Python runs signal handlers only on the main
// thread, which is the one that imports.
const std::thread::id import_thread = std::this_thread::get_id();

// The core's interrupt hook: called by every host wait at least every 50 ms, on the
// waiting thread. On the main thread it runs the interpreter's pending signal handlers
// (taking the GIL for that moment); nonzero when one raised (KeyboardInterrupt), so
// the wait ends. Never throws, never touches Python during finalization.
extern "C" int32_t python_signal_raised() noexcept {
  if (std::this_thread::get_id() != import_thread || !Py_IsInitialized()) {
    return 0;
  }
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) {
    return 0;
  }
#else
  if (_Py_IsFinalizing()) {
    return 0;
  }
#endif
  const PyGILState_STATE gil = PyGILState_Ensure();
  const int raised = PyErr_CheckSignals() != 0 ? 1 : 0;

  PyGILState_Release(gil);
  return raised;
}

void register_backends() {
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

py::tuple flat_layout(sm::SymmetricMemory& handle) {
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

} // namespace

SymmwinWindow* symmwin_torch::window_of(
    const c10::intrusive_ptr<sm::SymmetricMemory>& handle) {
  auto* ours = dynamic_cast<SymmwinSymmetricMemory*>(handle.get());
  return ours == nullptr ? nullptr : ours->window();
}

void symmwin_torch::check_op(const char* op, SymmwinStatus status) {
  if (status == SYMMWIN_OK) {
    return;
  }
  const std::string message = "symmwin." + std::string(op) + ": " + symmwin_last_error();
  if (status == SYMMWIN_INTERRUPTED) {
    raise_interrupted(message);
  }
  if (is_own_timeout(status)) {
    throw SymmwinTimeoutError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
  }
  TORCH_CHECK(false, message);
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
      m, "flat_layout", flat_layout, "(base, stride) with buffer_ptrs[r] == base + r * stride.");
  def_on_handle(
      m,
      "rank_to_global",
      [](sm::SymmetricMemory& handle) { return handle.get_rank_to_global_rank(); },
      "Global rank of every group rank of a handle.");
  def_on_handle(
      m,
      "direct_peers",
      [](sm::SymmetricMemory& handle) {
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
      },
      "Ranks whose memory a handle maps (load/store reachable), in rank order.");
  def_on_handle(
      m,
      "world_within_direct_access",
      [](sm::SymmetricMemory& handle) { return handle.world_within_direct_access(); },
      "True when every rank of the handle's group is mapped (torch does not expose it).");
}

// `symmwin.TimeoutError` (a DistBackendError), and the translation of the core's
// timeouts into it.
void def_timeout_error(py::module_& m) {
  // Leaked on purpose: the class must outlive every exception raised at exit.
  static auto* timeout_error = new py::object(py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc(
          "symmwin.TimeoutError",
          "symmwin's own timeout: peers did not arrive in time (a DistBackendError).",
          py::module_::import("torch.distributed").attr("DistBackendError").ptr(),
          nullptr)));
  m.attr("TimeoutError") = *timeout_error;
  // Global, not module-local: the error is raised inside torch's own bindings
  // (symm_mem.rendezvous, hdl.barrier, ...). Newer translators are tried first.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const SymmwinTimeoutError& e) {
      PyErr_SetString(timeout_error->ptr(), e.what_without_backtrace());
    }
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "symmwin's torch backend (C++ side); use the `symmwin` package.";
  m.def(
      "register",
      &register_backends,
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
  def_timeout_error(m);
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
      "allocation_count",
      &symmwin_allocation_count,
      "Number of live symmwin allocations in this process.");
}
