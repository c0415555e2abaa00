//! A value in pinned host memory that kernels write through its device mapping: how a
//! device failure reaches the host even after the trap that follows it has lost the
//! CUDA context.

use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, DriverError};

/// A `T` in page-locked, device-mapped host memory of one context, freed on drop (the
/// value itself is not dropped: `T` is plain data and atomics).
pub(super) struct Pinned<T> {
    ctx: Arc<PrimaryContext>,
    host: *mut T,
    /// The value's device address, for kernel arguments.
    pub(super) device: u64,
    /// What the value is, for a failed free.
    what: &'static str,
}

impl<T> std::fmt::Debug for Pinned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The value is the device's to write: only where it lives is shown.
        f.debug_struct("Pinned")
            .field("what", &self.what)
            .field("host", &self.host)
            .field("device", &format_args!("{:#x}", self.device))
            .finish()
    }
}

impl<T> Pinned<T> {
    /// `value` in new pinned memory of `ctx`; `what` names it if freeing it fails.
    pub(super) fn new(
        ctx: &Arc<PrimaryContext>,
        value: T,
        what: &'static str,
    ) -> std::result::Result<Self, DriverError> {
        let _guard = ctx.enter()?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: our context is current; Drop frees the memory.
        let host = unsafe { driver::mem_host_alloc(std::mem::size_of::<T>(), flags) }?;
        let mut pinned = Pinned {
            ctx: Arc::clone(ctx),
            host: host.cast::<T>(),
            device: 0,
            what,
        };
        // SAFETY: the allocation is page-aligned, large enough, and not yet shared with
        // the device, so initialising it through a plain write races with nothing.
        unsafe { pinned.host.write(value) };
        // SAFETY: `host` came from cuMemHostAlloc with DEVICEMAP.
        pinned.device = unsafe { driver::mem_host_device_pointer(host) }?;
        Ok(pinned)
    }

    /// The value, as the host sees it while the device may write it: `T` is read
    /// through its atomics, or through [`Pinned::as_ptr`] once they say the device is
    /// done.
    pub(super) fn get(&self) -> &T {
        // SAFETY: initialised in `new` and alive until drop; the device only writes it
        // with stores of the same layout.
        unsafe { &*self.host }
    }

    /// The value's host address, for volatile reads of what the device wrote.
    pub(super) fn as_ptr(&self) -> *const T {
        self.host
    }
}

// SAFETY: the pointer is to process-wide pinned memory; `T: Sync` says the value may be
// read from any thread (through atomics and volatile reads).
unsafe impl<T: Sync> Send for Pinned<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Pinned<T> {}

impl<T> Drop for Pinned<T> {
    fn drop(&mut self) {
        // SAFETY: the memory is ours; the owner of the kernels that could write it
        // waited for them before dropping it.
        let free = || unsafe { driver::mem_free_host(self.host.cast()) };
        self.ctx
            .release_in_drop(tracing::Level::DEBUG, self.what, free);
    }
}
