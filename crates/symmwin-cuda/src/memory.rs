//! Physical device memory: created here or imported from a peer, released on drop.

use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, PhaseExt};
use symmwin_device::error::{Error, Phase, Result};
use symmwin_device::provider::{HandleType, Memory, SharedHandle};

/// Physical device memory (created here or imported from a peer). Released on drop;
/// mappings of it stay valid until they are unmapped.
#[derive(Debug)]
pub struct CudaMemory {
    pub(super) ctx: Arc<PrimaryContext>,
    pub(super) handle: sys::CUmemGenericAllocationHandle,
    pub(super) len: usize,
    pub(super) handle_type: HandleType,
}

impl Memory for CudaMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn export(&self) -> Result<SharedHandle> {
        let _guard = self.ctx.enter().phase(Phase::Export)?;
        match self.handle_type {
            HandleType::PosixFd => {
                // SAFETY: the handle is live and carries the POSIX fd handle type.
                let fd = unsafe { driver::mem_export_fd(self.handle) }.phase(Phase::Export)?;
                // The driver's fd would otherwise leak into every child process.
                rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
                    .map_err(|e| Error::os(Phase::Export, "fcntl(F_SETFD)", e))?;
                Ok(SharedHandle::Fd(fd))
            }
            // SAFETY: the handle is live and carries the fabric handle type.
            HandleType::Fabric => unsafe { driver::mem_export_fabric(self.handle) }
                .map(SharedHandle::Fabric)
                .phase(Phase::Export),
        }
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and not used again; mappings keep the physical
        // memory alive on their own.
        let release = || unsafe { driver::mem_release(self.handle) };
        self.ctx
            .release_in_drop(tracing::Level::ERROR, "cuMemRelease", release);
    }
}
