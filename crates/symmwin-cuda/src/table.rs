//! A small device array of words (`buffer_ptrs_dev` and friends).

use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self};
use symmwin_device::provider::Table;

/// A small device allocation holding a copy of host words.
#[derive(Debug)]
pub struct CudaTable {
    pub(super) ctx: Arc<PrimaryContext>,
    pub(super) ptr: sys::CUdeviceptr,
}

impl Table for CudaTable {
    fn ptr(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for CudaTable {
    fn drop(&mut self) {
        // SAFETY: the allocation is ours and its users are gone with the table.
        let free = || unsafe { driver::mem_free(self.ptr) };
        self.ctx
            .release_in_drop(tracing::Level::ERROR, "cuMemFree", free);
    }
}
