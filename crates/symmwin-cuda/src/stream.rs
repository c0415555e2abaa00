//! The provider's private non-blocking stream.

use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, PhaseExt};
use symmwin_device::error::{Phase, Result};

/// A non-blocking stream for the provider's own copies and memsets.
#[derive(Debug)]
pub(super) struct PrivateStream {
    pub(super) ctx: Arc<PrimaryContext>,
    pub(super) raw: sys::CUstream,
}

// SAFETY: a CUstream may be used from any thread; the handle is immutable.
unsafe impl Send for PrivateStream {}
// SAFETY: as above; the driver serialises concurrent submissions to one stream.
unsafe impl Sync for PrivateStream {}

impl PrivateStream {
    pub(super) fn new(ctx: &Arc<PrimaryContext>) -> Result<Self> {
        let _guard = ctx.enter().phase(Phase::Probe)?;
        // Non-blocking: the legacy default stream would make every zeroing wait for
        // (and be waited on by) all work on torch's blocking streams.
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint;
        // SAFETY: our context is current; Drop destroys the stream in it.
        let raw = unsafe { driver::stream_create(flags) }.phase(Phase::Probe)?;
        Ok(PrivateStream {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    pub(super) fn synchronize(&self) -> driver::DriverResult<()> {
        // SAFETY: the stream is live; its context is current in every caller.
        unsafe { driver::stream_synchronize(self.raw) }
    }
}

impl Drop for PrivateStream {
    fn drop(&mut self) {
        // SAFETY: the stream is ours and no span or provider uses it any more.
        let destroy = || unsafe { driver::stream_destroy(self.raw) };
        self.ctx
            .release_in_drop(tracing::Level::DEBUG, "cuStreamDestroy", destroy);
    }
}
