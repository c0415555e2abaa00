// torch's process groups, by name, as the core's groups.
#pragma once

#include <string>

namespace symmwin_torch {

// torch's own default when no group is given (the world group's registered name).
// put/get/put_with_signal name no group either: as in torch, their peers are world
// ranks.
inline constexpr const char* kWorldGroup = "0";

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

// Register the process group now known as `name` with the core. Every call: a name
// can be reused by a new process group once torch destroys the old one, and the
// core tells them apart by their store (a repeat for the same store is a no-op).
void ensure_group(const std::string& name, int device);

#pragma GCC visibility pop

} // namespace symmwin_torch
