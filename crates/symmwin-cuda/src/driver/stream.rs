//! Streams.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>

use std::ffi::c_uint;

use cudarc::driver::sys;

use super::{check, written, DriverResult};

/// `cuStreamCreate`.
///
/// # Safety
/// A context must be current; the stream must be destroyed with [`stream_destroy`]
/// before that context is released.
pub unsafe fn stream_create(flags: c_uint) -> DriverResult<sys::CUstream> {
    written("cuStreamCreate", std::ptr::null_mut(), |stream| {
        // SAFETY: writes one handle to a local.
        unsafe { sys::cuStreamCreate(stream, flags) }
    })
}

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` must come from [`stream_create`] and not be used afterwards.
pub unsafe fn stream_destroy(stream: sys::CUstream) -> DriverResult<()> {
    // SAFETY: the caller owns the stream.
    check("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream)
    })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `stream` must be live in the current context (null: the legacy default stream).
pub unsafe fn stream_synchronize(stream: sys::CUstream) -> DriverResult<()> {
    // SAFETY: the caller guarantees the stream is live.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream)
    })
}
