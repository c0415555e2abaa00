//! Streams.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>

use std::ffi::c_uint;

use cudarc::driver::sys;

use super::{check, DriverResult};

/// `cuStreamCreate`.
///
/// # Safety
/// A context must be current; the stream must be destroyed with [`stream_destroy`]
/// before that context is released.
pub unsafe fn stream_create(flags: c_uint) -> DriverResult<sys::CUstream> {
    let mut stream: sys::CUstream = std::ptr::null_mut();
    // SAFETY: writes one handle to a local.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut stream, flags)
    })?;
    Ok(stream)
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
