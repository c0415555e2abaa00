// A torch process group as the core's group: its ranks (group and global), its
// timeout, its store and the process-group link to the ranks of other hosts.

#include "groups.h"

#include "errors.h"
#include "remote_bridge.h"
#include "store_bridge.h"

#include <symmwin.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace {

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

} // namespace

void symmwin_torch::ensure_group(const std::string& name, int device) {
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
