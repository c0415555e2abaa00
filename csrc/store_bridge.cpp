// SymmwinStore over a c10d::Store. Rust may call these from any thread; no C++
// exception may unwind into it.

#include "store_bridge.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

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

} // namespace

std::string symmwin_torch::describe_store(const c10::intrusive_ptr<c10d::Store>& store) {
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

SymmwinStore symmwin_torch::make_store(
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
