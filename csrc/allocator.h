// symmwin's SymmetricMemoryAllocator, and its registration with torch.
#pragma once

namespace symmwin_torch {

// Shared by the extension's files only: not exported from the module.
#pragma GCC visibility push(hidden)

// Make SYMMWIN (CUDA) and SYMMWIN_HOST (CPU) available to set_backend. Idempotent.
void register_backends();

#pragma GCC visibility pop

} // namespace symmwin_torch
