//! A loaded PTX module (the signal kernels' and the ops kernels'): what its kernels
//! are looked up in, and what waits for them before it goes.

use std::ffi::CStr;
use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, DriverError};

/// A loaded PTX module. On drop it waits for the context's work, then unloads: a
/// kernel still running would otherwise run from an unloaded module, or write into
/// a record its owner frees next (owners declare the module before their records,
/// so it is dropped first).
#[derive(Debug)]
pub(super) struct Module {
    ctx: Arc<PrimaryContext>,
    raw: sys::CUmodule,
}

impl Module {
    pub(super) fn load(
        ctx: &Arc<PrimaryContext>,
        ptx: &CStr,
    ) -> std::result::Result<Self, DriverError> {
        let _guard = ctx.enter()?;
        // SAFETY: our context is current; Drop unloads the module in the same context.
        let raw = unsafe { driver::module_load_data(ptx) }?;
        Ok(Module {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// A kernel of the module; valid while the module is, which its owner guarantees by
    /// keeping both together.
    pub(super) fn function(
        &self,
        name: &CStr,
    ) -> std::result::Result<sys::CUfunction, DriverError> {
        // SAFETY: the module is live; its owner keeps it alive as long as the handle.
        unsafe { driver::module_get_function(self.raw, name) }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.ctx
            .synchronize_in_drop("synchronising before unloading a kernel module");
        // SAFETY: the module is ours and no kernel of it runs any more (above).
        let unload = || unsafe { driver::module_unload(self.raw) };
        let what = "unloading a kernel module";
        self.ctx
            .release_in_drop(tracing::Level::DEBUG, what, unload);
    }
}
