//! Modules: loading the embedded PTX and finding its kernels.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html>

use std::ffi::CStr;

use cudarc::driver::sys;

use super::{check, written, DriverResult};

/// `cuModuleLoadData` of NUL-terminated PTX text.
///
/// # Safety
/// A context must be current; the module must be unloaded with [`module_unload`] before
/// that context is released.
pub unsafe fn module_load_data(image: &CStr) -> DriverResult<sys::CUmodule> {
    written("cuModuleLoadData", std::ptr::null_mut(), |module| {
        // SAFETY: PTX images are read up to their NUL terminator, which `CStr` guarantees.
        unsafe { sys::cuModuleLoadData(module, image.as_ptr().cast()) }
    })
}

/// `cuModuleUnload`.
///
/// # Safety
/// `module` must be live, and no function from it may be launched afterwards.
pub unsafe fn module_unload(module: sys::CUmodule) -> DriverResult<()> {
    // SAFETY: the caller owns the module.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
}

/// `cuModuleGetFunction`.
///
/// # Safety
/// `module` must be live; the function is valid only while it is.
pub unsafe fn module_get_function(
    module: sys::CUmodule,
    name: &CStr,
) -> DriverResult<sys::CUfunction> {
    written("cuModuleGetFunction", std::ptr::null_mut(), |function| {
        // SAFETY: `name` is NUL-terminated; one handle is written to a local.
        unsafe { sys::cuModuleGetFunction(function, module, name.as_ptr()) }
    })
}
