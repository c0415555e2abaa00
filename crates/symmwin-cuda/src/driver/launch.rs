//! Kernel launch.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html>

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{check, DriverResult};

/// `cuLaunchKernel` of a one-dimensional grid.
///
/// # Safety
/// A context owning `function` and `stream` must be current; `params` must point at one
/// value per kernel parameter, of exactly the parameter's type, and every address the
/// kernel dereferences must stay valid until the stream has run it.
#[inline]
pub unsafe fn launch_kernel(
    function: sys::CUfunction,
    grid: u32,
    block: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> DriverResult<()> {
    // SAFETY: the caller guarantees the parameter layout and the lifetime of everything
    // the kernel touches; the driver copies `params` before returning.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            function,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}
