// SymmwinRemote over a c10d ProcessGroup: flag messages for barrier / put_signal /
// wait_signal and data transfers for device operations, to ranks that symmwin cannot
// map. No exception may unwind into Rust: every callback catches and reports.
//
// Host memory (gloo): sends complete when the peer receives, so a send is handed to a
// completer thread of its peer that waits for it and keeps a failure for the next call;
// receives are waited for here, up to the deadline. A gloo wait that times out leaves
// the process group unusable (gloo poisons its context), as any gloo timeout does.
//
// CUDA memory (NCCL): everything is ordered on the current stream. Several messages go
// in one coalesced batch (NCCL needs both directions of a pair grouped); the current
// stream waits for the receives (and, for data, for the sends, whose buffers the
// caller may reuse once the op is complete on the stream). NCCL point-to-point has no
// per-call timeout: a dead peer is caught by the process group's own timeout and
// watchdog.
//
// CUDA memory over a process group without NCCL (gloo only): every message is staged
// through host memory, after the current stream has drained, and the host path above
// runs; slower, but the same semantics, and the same timeouts as host memory.

#include "symmwin_remote.h"

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace symmwin_torch {
namespace {

using Clock = std::chrono::steady_clock;

// A failure to report: the peer whose message failed (-1: unknown) and why.
struct Failure {
  int peer = -1;
  std::string message;
};

// Failures of sends that completed after their call, reported by the next call.
struct Reports {
  std::mutex mutex;
  std::optional<Failure> failed;

  void record(Failure failure) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed) {
      failed = std::move(failure);
    }
  }
};

// Sends to one peer in flight on host memory, waited for in order by one thread: a
// peer that does not receive (stuck, or dead without a closed connection yet) holds
// up no other peer's sends, so the failure of a dead peer is always recorded.
struct Completer {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<c10::intrusive_ptr<c10d::Work>> queue;
  bool stop = false;
  int peer;
  std::shared_ptr<Reports> reports;

  Completer(int to, std::shared_ptr<Reports> sink) : peer(to), reports(std::move(sink)) {}

  static void run(const std::shared_ptr<Completer>& self) {
    for (;;) {
      c10::intrusive_ptr<c10d::Work> work;
      {
        std::unique_lock<std::mutex> lock(self->mutex);
        self->ready.wait(lock, [&] { return self->stop || !self->queue.empty(); });
        if (self->queue.empty()) {
          return;
        }
        work = std::move(self->queue.front());
        self->queue.pop_front();
      }
      try {
        work->wait();
      } catch (const std::exception& e) {
        self->reports->record(Failure{self->peer, e.what()});
      } catch (...) {
        self->reports->record(Failure{self->peer, "unknown exception"});
      }
    }
  }
};

// True when the group reaches CUDA tensors through NCCL (else they are staged).
bool has_nccl(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  try {
    return pg->getBackend(c10::DeviceType::CUDA)->getBackendName() == "nccl";
  } catch (const std::exception&) {
    return false;
  }
}

struct Remote {
  c10::weak_intrusive_ptr<c10d::ProcessGroup> pg;
  c10::Device device;
  // CUDA memory through a group without NCCL: messages go through host memory.
  bool staged = false;
  std::shared_ptr<Reports> reports = std::make_shared<Reports>();
  std::mutex completers_mutex;
  // By peer, made with the first send to it: most groups never have a remote peer.
  std::map<int, std::shared_ptr<Completer>> completers;

  Remote(const c10::intrusive_ptr<c10d::ProcessGroup>& group, c10::Device dev)
      : pg(group), device(dev), staged(dev.is_cuda() && !has_nccl(group)) {}

  // Device of the messages' tensors: the host when staged.
  c10::Device message_device() const {
    return staged ? c10::Device(c10::DeviceType::CPU) : device;
  }

  // Staged messages leave only after the stream's earlier work (a local barrier, the
  // writes the messages publish) has completed.
  void drain_stream() const {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).synchronize();
  }

  ~Remote() {
    std::lock_guard<std::mutex> lock(completers_mutex);
    for (auto& [peer, completer] : completers) {
      std::lock_guard<std::mutex> queue_lock(completer->mutex);
      completer->stop = true;
      completer->ready.notify_all();
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group() const {
    auto strong = pg.lock();
    TORCH_CHECK(strong, "the group's process group was destroyed");
    return strong;
  }

  // An earlier send that failed, reported once.
  void raise_earlier_failure(int& peer) {
    std::lock_guard<std::mutex> lock(reports->mutex);
    if (reports->failed) {
      auto failure = std::move(*reports->failed);
      reports->failed.reset();
      peer = failure.peer;
      TORCH_CHECK(false, "an earlier signal to rank ", failure.peer, " failed: ", failure.message);
    }
  }

  void complete_later(int peer, c10::intrusive_ptr<c10d::Work> work) {
    std::shared_ptr<Completer> completer;
    {
      std::lock_guard<std::mutex> lock(completers_mutex);
      auto& slot = completers[peer];
      if (!slot) {
        slot = std::make_shared<Completer>(peer, reports);
        // Detached: a send whose peer never receives blocks its wait forever, and
        // the process must still be able to exit. The thread shares the state.
        std::thread(Completer::run, slot).detach();
      }
      completer = slot;
    }
    std::lock_guard<std::mutex> lock(completer->mutex);
    completer->queue.push_back(std::move(work));
    completer->ready.notify_all();
  }
};

// True when a backend's message says it gave up waiting.
bool says_timed_out(const std::string& what) {
  std::string lower = what;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

void report(SymmwinRemoteError* error, int peer, const std::string& what) {
  if (error == nullptr) {
    return;
  }
  error->peer = peer;
  error->timed_out = says_timed_out(what);
  std::snprintf(error->message, sizeof(error->message), "%s", what.c_str());
}

std::string message_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error ? c10_error->what_without_backtrace() : e.what();
}


template <typename F>
int guarded(void* ctx, SymmwinRemoteError* error, F&& f) noexcept {
  int peer = -1;
  try {
    f(*static_cast<Remote*>(ctx), peer);
    return 0;
  } catch (const c10::Error& e) {
    report(error, peer, e.what_without_backtrace());
  } catch (const std::exception& e) {
    report(error, peer, e.what());
  } catch (...) {
    report(error, peer, "unknown exception");
  }
  return -1;
}

// One message of a batch: its peer, direction, tag and buffer.
struct Message {
  int peer;
  bool send;
  int tag;
  at::Tensor tensor;
};

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

using Waits = std::vector<std::pair<int, c10::intrusive_ptr<c10d::Work>>>;

// Waits for every work (each up to the deadline) and then raises the first failure,
// a lost connection before a timeout: a rank that died is named, not a live rank that
// was itself waiting for it.
void wait_all(Waits& waits, Clock::time_point deadline, int& peer) {
  std::optional<Failure> lost;
  std::optional<Failure> late;
  for (auto& [who, work] : waits) {
    try {
      work->wait(left_until(deadline));
    } catch (const std::exception& e) {
      auto message = message_of(e);
      auto& first = says_timed_out(message) ? late : lost;
      if (!first) {
        first = Failure{who, std::move(message)};
      }
    }
  }
  if (lost || late) {
    const auto& failure = lost ? *lost : *late;
    peer = failure.peer;
    TORCH_CHECK(false, failure.message);
  }
}

c10::intrusive_ptr<c10d::Work> post(c10d::ProcessGroup& pg, Message& m) {
  std::vector<at::Tensor> tensors{m.tensor};
  return m.send ? pg.send(tensors, m.peer, m.tag) : pg.recv(tensors, m.peer, m.tag);
}

// Host memory: post everything; receives (and, for transfers, sends) are waited for
// here; flag sends go to the completer.
void run_host(Remote& r, std::vector<Message>& batch, bool wait_sends, uint64_t timeout_ms, int& peer) {
  auto pg = r.group();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  Waits waits;
  for (auto& m : batch) {
    peer = m.peer;
    auto work = post(*pg, m);
    if (m.send && !wait_sends) {
      r.complete_later(m.peer, std::move(work));
    } else {
      waits.emplace_back(m.peer, std::move(work));
    }
  }
  wait_all(waits, deadline, peer);
}

// CUDA memory: one coalesced batch when there are several messages, ordered on the
// current stream; the stream waits for the receives, and for the sends too when
// `wait_sends` (data: the caller reuses the buffers once the stream is past the op).
void run_cuda(Remote& r, std::vector<Message>& batch, bool wait_sends, int& peer) {
  auto pg = r.group();
  const bool grouped = batch.size() > 1;
  if (grouped) {
    pg->startCoalescing(c10::DeviceType::CUDA);
  }
  c10::intrusive_ptr<c10d::Work> last;
  for (auto& m : batch) {
    peer = m.peer;
    last = post(*pg, m);
  }
  peer = -1;
  if (grouped) {
    last = pg->endCoalescing(c10::DeviceType::CUDA);
  }
  const bool receives = std::any_of(batch.begin(), batch.end(), [](const Message& m) { return !m.send; });
  if (last && (receives || wait_sends)) {
    last->wait();
  }
}

// CUDA data over a group without NCCL: sends copied to the host (after the stream's
// earlier work), the host path, then the receives copied onto the current stream.
void run_staged(Remote& r, std::vector<Message>& batch, uint64_t timeout_ms, int& peer) {
  r.drain_stream();
  std::vector<Message> host;
  host.reserve(batch.size());
  const auto on_host = at::TensorOptions().dtype(at::kByte).device(c10::DeviceType::CPU);
  for (auto& m : batch) {
    auto staging = m.send ? m.tensor.to(c10::DeviceType::CPU) : at::empty({m.tensor.numel()}, on_host);
    host.push_back({m.peer, m.send, m.tag, staging});
  }
  run_host(r, host, /*wait_sends=*/true, timeout_ms, peer);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].send) {
      batch[i].tensor.copy_(host[i].tensor);
    }
  }
}

// One batch on the path the group's memory and backend take. Data sends are waited
// for (the caller reuses their buffers once the op is complete); flag sends are not.
// Staged flags are host tensors already: they only wait for the stream first.
void run_batch(Remote& r, std::vector<Message>& batch, bool data, uint64_t timeout_ms, int& peer) {
  if (r.staged && data) {
    run_staged(r, batch, timeout_ms, peer);
  } else if (r.staged) {
    r.drain_stream();
    run_host(r, batch, /*wait_sends=*/false, timeout_ms, peer);
  } else if (r.device.is_cuda()) {
    run_cuda(r, batch, /*wait_sends=*/data, peer);
  } else {
    run_host(r, batch, /*wait_sends=*/data, timeout_ms, peer);
  }
}

int remote_flags(
    void* ctx,
    const SymmwinFlag* ops,
    size_t n,
    uint64_t timeout_ms,
    void* /*stream: c10d orders on the current stream*/,
    SymmwinRemoteError* error) {
  return guarded(ctx, error, [&](Remote& r, int& peer) {
    r.raise_earlier_failure(peer);
    std::vector<Message> batch;
    batch.reserve(n);
    const auto options = at::TensorOptions().dtype(at::kInt).device(r.message_device());
    for (size_t i = 0; i < n; ++i) {
      batch.push_back({ops[i].peer, ops[i].direction == SYMMWIN_SEND, ops[i].tag, at::zeros({1}, options)});
    }
    run_batch(r, batch, /*data=*/false, timeout_ms, peer);
  });
}

int remote_transfer(
    void* ctx,
    const SymmwinTransfer* ops,
    size_t n,
    uint64_t timeout_ms,
    void* /*stream*/,
    SymmwinRemoteError* error) {
  return guarded(ctx, error, [&](Remote& r, int& peer) {
    r.raise_earlier_failure(peer);
    std::vector<Message> batch;
    batch.reserve(n);
    const auto options = at::TensorOptions().dtype(at::kByte).device(r.device);
    for (size_t i = 0; i < n; ++i) {
      const auto len = static_cast<int64_t>(ops[i].len);
      batch.push_back({ops[i].peer, ops[i].direction == SYMMWIN_SEND, ops[i].tag, at::from_blob(ops[i].ptr, {len}, options)});
    }
    run_batch(r, batch, /*data=*/true, timeout_ms, peer);
  });
}

void remote_release(void* ctx) {
  try {
    delete static_cast<Remote*>(ctx);
  } catch (...) {
  }
}

} // namespace

SymmwinRemote make_remote(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int device) {
  const auto dev = device < 0
      ? c10::Device(c10::DeviceType::CPU)
      : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  SymmwinRemote remote{};
  remote.ctx = new Remote(pg, dev);
  remote.flags = remote_flags;
  remote.transfer = remote_transfer;
  remote.release = remote_release;
  return remote;
}

} // namespace symmwin_torch
