//! Classic memory management: device allocations for scratch, pinned host memory, and
//! asynchronous copies and fills on a stream.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html>

use std::ffi::{c_uint, c_void};

use cudarc::driver::sys;

use super::{check, written, DriverResult};

/// `cuMemsetD8Async`.
///
/// # Safety
/// `[ptr, ptr + n)` must be mapped and accessible to the stream's device, and stay so
/// until the stream has passed this operation.
pub unsafe fn memset_d8_async(
    ptr: sys::CUdeviceptr,
    value: u8,
    n: usize,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees the range and stream are valid.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, n, stream)
    })
}

/// `cuMemAlloc`.
///
/// # Safety
/// A context must be current; the memory must be freed with [`mem_free`].
pub unsafe fn mem_alloc(size: usize) -> DriverResult<sys::CUdeviceptr> {
    written("cuMemAlloc", 0, |ptr| {
        // SAFETY: writes one address to a local.
        unsafe { sys::cuMemAlloc_v2(ptr, size) }
    })
}

/// `cuMemFree`.
///
/// # Safety
/// `ptr` must come from [`mem_alloc`] and not be used afterwards.
pub unsafe fn mem_free(ptr: sys::CUdeviceptr) -> DriverResult<()> {
    // SAFETY: the caller owns the allocation.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// `cuMemcpyHtoDAsync`.
///
/// # Safety
/// `dst` must hold `src.len()` bytes; `src` must stay alive and unchanged until the
/// stream has passed the copy.
pub unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: &[u8],
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both buffers for the copy's duration.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), stream)
    })
}

/// `cuMemcpyDtoHAsync`.
///
/// # Safety
/// `src` must hold `dst.len()` readable bytes; `dst` must stay alive and untouched until
/// the stream has passed the copy.
pub unsafe fn memcpy_dtoh_async(
    dst: &mut [u8],
    src: sys::CUdeviceptr,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both buffers for the copy's duration.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), stream)
    })
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// Both ranges must hold `len` accessible bytes until the stream has passed the copy.
pub unsafe fn memcpy_dtod_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    len: usize,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both ranges for the copy's duration.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream)
    })
}

/// `cuMemHostAlloc`.
///
/// # Safety
/// A context must be current; the memory must be freed with [`mem_free_host`].
pub unsafe fn mem_host_alloc(size: usize, flags: c_uint) -> DriverResult<*mut c_void> {
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer to a local.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut ptr, size, flags)
    })?;
    Ok(ptr)
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `ptr` must come from [`mem_host_alloc`], with no device work still using it.
pub unsafe fn mem_free_host(ptr: *mut c_void) -> DriverResult<()> {
    // SAFETY: the caller owns the allocation.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) })
}

/// `cuMemHostGetDevicePointer`.
///
/// # Safety
/// `ptr` must come from [`mem_host_alloc`] with `CU_MEMHOSTALLOC_DEVICEMAP`.
pub unsafe fn mem_host_device_pointer(ptr: *mut c_void) -> DriverResult<sys::CUdeviceptr> {
    written("cuMemHostGetDevicePointer", 0, |dptr| {
        // SAFETY: writes one address to a local.
        unsafe { sys::cuMemHostGetDevicePointer_v2(dptr, ptr, 0) }
    })
}
