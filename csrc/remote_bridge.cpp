// SymmwinRemote over a c10d ProcessGroup: post sends and receives of given bytes, wait
// for one posted work, report how it ended. Which path a message takes (host, NCCL,
// staged through the host), who waits for it and when a failure is reported are the
// core's (crates/symmwin/src/signal/process_group.rs). No exception may unwind into
// Rust: every callback catches and reports.

#include "remote_bridge.h"

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace symmwin_torch {
namespace {

struct Remote {
  c10::weak_intrusive_ptr<c10d::ProcessGroup> pg;
  c10::Device device;

  c10::intrusive_ptr<c10d::ProcessGroup> group() const {
    auto strong = pg.lock();
    TORCH_CHECK(strong, "the group's process group was destroyed");
    return strong;
  }
};

// A posted work and the flag buffers it sends or receives into.
struct Posted {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> keep;
};

// The status for a failure: c10d's network error type means the connection is gone;
// anything else the core judges (a gloo timeout and a lost peer share one type).
template <typename F>
int guarded(SymmwinRemoteError* error, int& peer, F&& f) noexcept {
  auto report = [&](int status, const char* what) {
    if (error != nullptr) {
      error->peer = peer;
      std::snprintf(error->message, sizeof(error->message), "%s", what);
    }
    return status;
  };
  try {
    f();
    return SYMMWIN_REMOTE_OK;
  } catch (const c10::DistNetworkError& e) {
    return report(SYMMWIN_REMOTE_BROKEN, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return report(SYMMWIN_REMOTE_FAILED, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return report(SYMMWIN_REMOTE_FAILED, e.what());
  } catch (...) {
    return report(SYMMWIN_REMOTE_FAILED, "unknown exception");
  }
}

c10::Device device_of(const Remote& r, int memory) {
  return memory == SYMMWIN_MEMORY_DEVICE ? r.device : c10::Device(c10::DeviceType::CPU);
}

// The message's bytes as a tensor on `device`; a flag (no bytes) is a new int of zero.
at::Tensor tensor_of(const SymmwinMessage& m, c10::Device device) {
  if (m.ptr == nullptr) {
    return at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  }
  const auto options = at::TensorOptions().dtype(at::kByte).device(device);
  return at::from_blob(m.ptr, {static_cast<int64_t>(m.len)}, options);
}

c10::intrusive_ptr<c10d::Work> post_one(c10d::ProcessGroup& pg, const SymmwinMessage& m, at::Tensor t) {
  std::vector<at::Tensor> tensors{std::move(t)};
  return m.direction == SYMMWIN_SEND ? pg.send(tensors, m.peer, m.tag) : pg.recv(tensors, m.peer, m.tag);
}

// Device batches go as one coalesced group (NCCL needs both directions of a pair
// grouped), its work in the last slot.
int remote_post(
    void* ctx,
    const SymmwinMessage* msgs,
    size_t n,
    int memory,
    void** works,
    SymmwinRemoteError* error) {
  int peer = -1;
  return guarded(error, peer, [&] {
    const auto& r = *static_cast<Remote*>(ctx);
    auto pg = r.group();
    const auto device = device_of(r, memory);
    const bool grouped = memory == SYMMWIN_MEMORY_DEVICE && n > 1;
    if (grouped) {
      pg->startCoalescing(c10::DeviceType::CUDA);
    }
    std::vector<at::Tensor> keep;
    for (size_t i = 0; i < n; ++i) {
      peer = msgs[i].peer;
      auto t = tensor_of(msgs[i], device);
      keep.push_back(t);
      auto work = post_one(*pg, msgs[i], t);
      if (!grouped) {
        works[i] = new Posted{std::move(work), {std::move(t)}};
      }
    }
    peer = -1;
    if (grouped) {
      works[n - 1] = new Posted{pg->endCoalescing(c10::DeviceType::CUDA), std::move(keep)};
    }
  });
}

int remote_wait(void* /*ctx*/, void* work, uint64_t timeout_ms, SymmwinRemoteError* error) {
  int peer = -1;
  return guarded(error, peer, [&] {
    auto& posted = *static_cast<Posted*>(work);
    if (timeout_ms == 0) {
      posted.work->wait();
    } else {
      posted.work->wait(std::chrono::milliseconds(timeout_ms));
    }
  });
}

void remote_release_work(void* /*ctx*/, void* work) {
  try {
    delete static_cast<Posted*>(work);
  } catch (...) {
  }
}

int remote_synchronize(void* ctx, void* /*stream: the current one*/, SymmwinRemoteError* error) {
  int peer = -1;
  return guarded(error, peer, [&] {
    const auto& r = *static_cast<Remote*>(ctx);
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(r.device).synchronize();
  });
}

int remote_copy(void* ctx, void* dst, const void* src, size_t len, int to_device, SymmwinRemoteError* error) {
  int peer = -1;
  return guarded(error, peer, [&] {
    const auto& r = *static_cast<Remote*>(ctx);
    const auto on = [&](bool device) {
      return at::TensorOptions().dtype(at::kByte).device(device ? r.device : c10::Device(c10::DeviceType::CPU));
    };
    const auto n = static_cast<int64_t>(len);
    auto to = at::from_blob(dst, {n}, on(to_device != 0));
    to.copy_(at::from_blob(const_cast<void*>(src), {n}, on(to_device == 0)));
  });
}

void remote_release(void* ctx) {
  try {
    delete static_cast<Remote*>(ctx);
  } catch (...) {
  }
}

// True when the group reaches CUDA tensors through NCCL (else they are staged).
bool has_nccl(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  try {
    return pg->getBackend(c10::DeviceType::CUDA)->getBackendName() == "nccl";
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace

SymmwinRemote make_remote(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int device) {
  const auto dev = device < 0
      ? c10::Device(c10::DeviceType::CPU)
      : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  SymmwinRemote remote{};
  remote.ctx = new Remote{c10::weak_intrusive_ptr<c10d::ProcessGroup>(pg), dev};
  remote.moves_device_memory = device >= 0 && has_nccl(pg) ? 1 : 0;
  remote.post = remote_post;
  remote.wait = remote_wait;
  remote.release_work = remote_release_work;
  remote.synchronize = remote_synchronize;
  remote.copy = remote_copy;
  remote.release = remote_release;
  return remote;
}

} // namespace symmwin_torch
