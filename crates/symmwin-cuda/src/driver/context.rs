//! Contexts: the device's primary context, and which context is current on a thread.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html>

use std::marker::PhantomData;

use cudarc::driver::sys;

use super::init::require_loaded;
use super::{check, written, DriverResult};

/// A current-context switch undone on drop, so callers that had another context current
/// (a different device under torch) get it back.
/// The lifetime ties the guard to whatever keeps the context alive.
#[must_use]
pub struct CtxGuard<'a> {
    previous: Option<sys::CUcontext>,
    _ctx: PhantomData<&'a ()>,
}

impl CtxGuard<'_> {
    /// Makes `ctx` current on this thread until the guard drops.
    ///
    /// # Safety
    /// `ctx` must be a live context (e.g. a retained primary context) that outlives the
    /// guard.
    #[inline]
    pub unsafe fn enter<'a>(ctx: sys::CUcontext) -> DriverResult<CtxGuard<'a>> {
        let current = ctx_get_current()?;
        if current == ctx {
            return Ok(CtxGuard {
                previous: None,
                _ctx: PhantomData,
            });
        }
        // SAFETY: the caller guarantees `ctx` is live.
        unsafe { ctx_set_current(ctx) }?;
        Ok(CtxGuard {
            previous: Some(current),
            _ctx: PhantomData,
        })
    }
}

impl Drop for CtxGuard<'_> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: `previous` was current on this thread a moment ago (or null, which
            // unbinds); restoring it leaves the thread as the caller had it.
            if let Err(e) = unsafe { ctx_set_current(previous) } {
                tracing::warn!("restoring the caller's CUDA context failed: {}", e.name());
            }
        }
    }
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `device` must come from [`device_get`](super::device_get); every success must be
/// paired with one [`primary_ctx_release`].
pub unsafe fn primary_ctx_retain(device: sys::CUdevice) -> DriverResult<sys::CUcontext> {
    written("cuDevicePrimaryCtxRetain", std::ptr::null_mut(), |ctx| {
        // SAFETY: writes one context handle to a local; the caller pairs it with a release.
        unsafe { sys::cuDevicePrimaryCtxRetain(ctx, device) }
    })
}

/// `cuDevicePrimaryCtxRelease`.
///
/// # Safety
/// Must balance one successful [`primary_ctx_retain`] of `device`; nothing may use the
/// context through this reference afterwards.
pub unsafe fn primary_ctx_release(device: sys::CUdevice) -> DriverResult<()> {
    // SAFETY: the caller balances a retain.
    check("cuDevicePrimaryCtxRelease", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(device)
    })
}

/// `cuCtxGetCurrent`: the context current on this thread, null for none.
pub fn ctx_get_current() -> DriverResult<sys::CUcontext> {
    require_loaded("cuCtxGetCurrent")?;
    written("cuCtxGetCurrent", std::ptr::null_mut(), |ctx| {
        // SAFETY: the library is loaded (checked above); writes one handle to a local.
        unsafe { sys::cuCtxGetCurrent(ctx) }
    })
}

/// `cuCtxSetCurrent`.
///
/// # Safety
/// `ctx` must be live or null.
pub unsafe fn ctx_set_current(ctx: sys::CUcontext) -> DriverResult<()> {
    // SAFETY: the caller guarantees `ctx` is live or null.
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// `cuCtxSynchronize`: waits for the current context's work; with no context current
/// the driver answers `CUDA_ERROR_INVALID_CONTEXT`.
pub fn ctx_synchronize() -> DriverResult<()> {
    require_loaded("cuCtxSynchronize")?;
    // SAFETY: the library is loaded (checked above); takes no arguments.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}
