//! The device's primary context, retained for as long as anything of ours uses it.

use cudarc::driver::sys;

use super::driver::{self, CtxGuard, DriverResult, PhaseExt};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// A retained primary context: the one torch and the CUDA runtime use, so retaining it
/// shares their context rather than creating a rival one.
#[derive(Debug)]
pub(super) struct PrimaryContext {
    pub(super) ordinal: i32,
    pub(super) cu_device: sys::CUdevice,
    pub(super) ctx: sys::CUcontext,
}

// SAFETY: a CUDA context handle may be made current on, and used from, any thread; the
// handle itself is an immutable token.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; nothing here is mutated after construction.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    pub(super) fn retain(ordinal: i32) -> Result<Self> {
        let cu_device = device(ordinal)?;
        // SAFETY: `cu_device` comes from cuDeviceGet; Drop balances the retain.
        let ctx = unsafe { driver::primary_ctx_retain(cu_device) }.phase(Phase::Probe)?;
        Ok(PrimaryContext {
            ordinal,
            cu_device,
            ctx,
        })
    }

    /// Runs `release`, a driver call freeing something of this context, from a
    /// destructor: with the context current, and a failure logged (a drop cannot
    /// return it) at `level`: `ERROR` where device memory stays allocated, `DEBUG`
    /// where nothing lasting is lost (after a trap every such call fails).
    pub(super) fn release_in_drop(
        &self,
        level: tracing::Level,
        what: &str,
        release: impl FnOnce() -> DriverResult<()>,
    ) {
        let Err(e) = self.enter().and_then(|_guard| release()) else {
            return;
        };
        if level == tracing::Level::ERROR {
            tracing::error!("{what} failed: {}", e.name());
        } else {
            tracing::debug!("{what} failed: {}", e.name());
        }
    }

    /// Waits for the device from a destructor, before freeing what a kernel still
    /// running would write into or run from (bounded by the kernels' timeout).
    pub(super) fn synchronize_in_drop(&self, what: &str) {
        // `release_in_drop` makes our context current for the call.
        let sync = driver::ctx_synchronize;
        self.release_in_drop(tracing::Level::DEBUG, what, sync);
    }

    /// Makes this context current on the calling thread until the guard drops.
    #[inline]
    pub(super) fn enter(&self) -> DriverResult<CtxGuard<'_>> {
        // SAFETY: the context stays retained while `self` lives, and the guard borrows
        // `self`.
        unsafe { CtxGuard::enter(self.ctx) }
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `retain`; every object that used the context
        // holds an Arc to it, so none is left.
        if let Err(e) = unsafe { driver::primary_ctx_release(self.cu_device) } {
            tracing::warn!(
                "releasing the primary context of device {} failed: {}",
                self.ordinal,
                e.name()
            );
        }
    }
}

/// Number of CUDA devices visible to this process.
pub fn device_count() -> Result<i32> {
    driver::ensure_loaded()?;
    driver::device_count().phase(Phase::Probe)
}

/// `cuDeviceGet` on a loaded driver, with a readable error for a bad ordinal.
pub(super) fn device(ordinal: i32) -> Result<sys::CUdevice> {
    driver::ensure_loaded()?;
    let count = device_count()?;
    if ordinal < 0 || ordinal >= count {
        return Err(Error::new(
            Phase::Probe,
            ErrorKind::InvalidArgument(format!(
                "CUDA device {ordinal} does not exist ({count} visible)"
            )),
        ));
    }
    driver::device_get(ordinal).phase(Phase::Probe)
}
