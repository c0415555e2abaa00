//! Thin wrappers over `cudarc::driver::sys`: each calls exactly one driver entry point
//! and turns its status into a [`DriverError`]. Everything above this module is safe
//! RAII code.
//!
//! The wrappers are grouped by the driver API's own families (one module each, with a
//! link to its section of the CUDA Driver API reference), as cudarc's result layer is.
//! A query that takes no pointer and hands out no handle to free is a safe function;
//! everything else is an `unsafe fn` whose `# Safety` section says what the caller
//! guarantees. Safe queries check [`ensure_loaded`] has succeeded first: before that,
//! cudarc would panic on the missing library, so they answer
//! `CUDA_ERROR_NOT_INITIALIZED` instead.
//!
//! A failed call yields a small `Copy` value (entry point + status) rather than a full
//! [`Error`]: the phase is known only to the caller, and the launch path must not format
//! strings unless something actually failed. Status names and descriptions:
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__ERROR.html>.

mod context;
mod device;
mod init;
mod launch;
mod memory;
mod module;
mod stream;
mod virtual_memory;

use std::ffi::{c_char, CStr};

use cudarc::driver::sys;

use symmwin_device::error::{Error, ErrorKind, Phase, Result};

pub use context::{ctx_synchronize, primary_ctx_release, primary_ctx_retain, CtxGuard};
pub use device::{
    device_attribute, device_can_access_peer, device_count, device_get, device_name,
    device_total_mem,
};
pub use init::{driver_version, ensure_loaded};
pub use launch::launch_kernel;
pub use memory::{
    mem_alloc, mem_free, mem_free_host, mem_host_alloc, mem_host_device_pointer, memcpy_dtod_async,
    memcpy_dtoh_async, memcpy_htod_async, memset_d8_async,
};
pub use module::{module_get_function, module_load_data, module_unload};
pub use stream::{stream_create, stream_destroy, stream_synchronize};
pub use virtual_memory::{
    allocation_granularity, create_and_export, device_prop, mem_address_free, mem_address_reserve,
    mem_create, mem_export_fabric, mem_export_fd, mem_import_fabric, mem_import_fd, mem_map,
    mem_release, mem_set_access_rw, mem_unmap,
};

/// A failed driver call: which entry point, and the status it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverError {
    /// The driver entry point, e.g. `cuMemCreate`.
    pub call: &'static str,
    /// The status it returned.
    pub code: sys::CUresult,
}

/// Which of the driver's two texts for a status.
#[derive(Clone, Copy)]
enum StatusText {
    /// `cuGetErrorName`, e.g. `CUDA_ERROR_NOT_PERMITTED`.
    Name,
    /// `cuGetErrorString`, a sentence.
    Description,
}

impl DriverError {
    /// The driver's name for the status, e.g. `CUDA_ERROR_NOT_PERMITTED`.
    pub fn name(&self) -> String {
        status_text(self.code, StatusText::Name).unwrap_or_else(|| format!("{:?}", self.code))
    }

    /// The driver's description of the status, with what to do where the driver's own
    /// words do not say it (see [`remedy`]).
    pub fn message(&self) -> String {
        let text = status_text(self.code, StatusText::Description)
            .unwrap_or_else(|| "unknown error".to_owned());
        match remedy(self.code) {
            Some(remedy) => format!("{text}; {remedy}"),
            None => text,
        }
    }

    /// The crate error for this failure during `phase`.
    pub fn at(self, phase: Phase) -> Error {
        Error::new(
            phase,
            ErrorKind::Driver {
                call: self.call,
                name: self.name(),
                message: self.message(),
            },
        )
    }
}

/// The driver's text for `code`; `None` for a code it does not know, or when libcuda is
/// not loaded (a status can only come from a loaded driver, but a test may build one).
fn status_text(code: sys::CUresult, which: StatusText) -> Option<String> {
    if !init::loaded() {
        return None;
    }
    let mut ptr: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName and cuGetErrorString only write a pointer to a static
    // string into the local (or leave it null for an unknown code); they need no
    // context and work before cuInit. The library is loaded (checked above).
    let status = unsafe {
        match which {
            StatusText::Name => sys::cuGetErrorName(code, &mut ptr),
            StatusText::Description => sys::cuGetErrorString(code, &mut ptr),
        }
    };
    if status != sys::CUresult::CUDA_SUCCESS || ptr.is_null() {
        return None;
    }
    // SAFETY: on success the driver returned a pointer to a NUL-terminated string with
    // static lifetime inside libcuda, which stays loaded for the life of the process.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Result of one driver call.
pub type DriverResult<T> = std::result::Result<T, DriverError>;

/// Attaches the protocol phase to a driver failure.
pub trait PhaseExt<T> {
    /// The crate result, with a failure attributed to `phase`.
    fn phase(self, phase: Phase) -> Result<T>;
}

impl<T> PhaseExt<T> for DriverResult<T> {
    fn phase(self, phase: Phase) -> Result<T> {
        self.map_err(|e| e.at(phase))
    }
}

#[inline]
fn check(call: &'static str, code: sys::CUresult) -> DriverResult<()> {
    if code == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, code })
    }
}

/// Runs `call`, a driver call that writes one value through the place it is given
/// (holding `initial` before), and returns that value when `name` succeeded.
#[inline]
fn written<T>(
    name: &'static str,
    initial: T,
    call: impl FnOnce(&mut T) -> sys::CUresult,
) -> DriverResult<T> {
    let mut value = initial;
    check(name, call(&mut value))?;
    Ok(value)
}

/// What the user must do about a status whose driver text names no remedy.
///
/// The kernels are committed as PTX ISA 9.0 (CUDA 13.0) and JIT-compiled by the driver
/// in `cuModuleLoadData`; an older driver refuses them with
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` ("compiled with an unsupported toolchain"),
/// which reads like a build problem on the user's side when it is the driver's age.
fn remedy(code: sys::CUresult) -> Option<&'static str> {
    match code {
        sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => Some(
            "symmwin's kernels are PTX ISA 9.0 (CUDA 13.0), which needs NVIDIA driver 580 \
             or newer: update the driver (nvidia-smi shows the installed one); no CUDA \
             toolkit is needed",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod remedy_tests {
    use super::*;

    #[test]
    fn unsupported_ptx_names_the_minimum_driver() {
        let remedy = remedy(sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            .expect("the PTX version error has a remedy");
        assert!(remedy.contains("driver 580 or newer"), "{remedy}");
        assert!(remedy.contains("PTX ISA 9.0"), "{remedy}");
    }

    #[test]
    fn other_statuses_keep_the_drivers_words_alone() {
        assert_eq!(remedy(sys::CUresult::CUDA_ERROR_NOT_PERMITTED), None);
    }

    #[test]
    fn remedy_states_the_ptx_version_that_is_committed() {
        for ptx in [
            include_str!("../../kernels/signal.ptx"),
            include_str!("../../kernels/ops.ptx"),
        ] {
            assert!(
                ptx.lines().any(|l| l.trim() == ".version 9.0"),
                "PTX version changed: update remedy()"
            );
        }
    }
}
