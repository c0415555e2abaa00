//! Loading libcuda and initialising the driver, and the driver's version.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VERSION.html>

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::{check, written, DriverError, DriverResult};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// Every driver entry point this module calls, by the symbol name cudarc resolves.
/// cudarc panics on a missing symbol, so [`ensure_loaded`] checks them all up front.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuMemGetAllocationGranularity",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemsetD8Async",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuLaunchKernel",
];

/// Why the driver cannot be used in this process; cached, so rebuilt on every request.
#[derive(Debug, Clone)]
enum InitFailure {
    NoDriver(String),
    Driver(DriverError),
}

static INIT: OnceLock<std::result::Result<(), InitFailure>> = OnceLock::new();

/// Loads libcuda, checks it exports everything we call, and runs `cuInit(0)`, once per
/// process. A machine without a driver gets [`ErrorKind::NoDriver`], never a panic.
pub fn ensure_loaded() -> Result<()> {
    match INIT.get_or_init(load_and_init) {
        Ok(()) => Ok(()),
        Err(InitFailure::NoDriver(why)) => {
            Err(Error::new(Phase::Probe, ErrorKind::NoDriver(why.clone())))
        }
        Err(InitFailure::Driver(e)) => Err(e.at(Phase::Probe)),
    }
}

/// Whether [`ensure_loaded`] has succeeded in this process: every entry point in
/// [`SYMBOLS`] is resolved, so calling one cannot panic.
pub(super) fn loaded() -> bool {
    matches!(INIT.get(), Some(Ok(())))
}

/// [`loaded`], as the status a driver call before `cuInit` would return.
pub(super) fn require_loaded(call: &'static str) -> DriverResult<()> {
    if loaded() {
        Ok(())
    } else {
        Err(DriverError {
            call,
            code: sys::CUresult::CUDA_ERROR_NOT_INITIALIZED,
        })
    }
}

fn load_and_init() -> std::result::Result<(), InitFailure> {
    // SAFETY: dlopen runs libcuda's initialisers, vendor code we must trust to use the
    // driver at all; the probe handle is closed again before returning.
    if !unsafe { sys::is_culib_present() } {
        return Err(InitFailure::NoDriver(
            "libcuda.so could not be loaded (no NVIDIA driver on this machine?)".into(),
        ));
    }
    // cudarc's loader panics if the library vanished between the two dlopens; that is
    // the only way it can fail here, so turn it into an error instead.
    // SAFETY: as above; the library is kept loaded for the life of the process.
    let lib = std::panic::catch_unwind(|| unsafe { sys::culib() })
        .map_err(|_| InitFailure::NoDriver("libcuda.so could not be loaded".into()))?;
    for name in SYMBOLS {
        // SAFETY: only the symbol's presence is tested; the pointer is never called or
        // dereferenced through this type.
        if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
            return Err(InitFailure::NoDriver(format!(
                "libcuda.so lacks {name}; the NVIDIA driver is too old"
            )));
        }
    }
    // SAFETY: cuInit takes no pointers and may be called any number of times; the
    // library is loaded and exports it (checked above).
    match check("cuInit", unsafe { sys::cuInit(0) }) {
        Ok(()) => Ok(()),
        Err(e) if e.code == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(InitFailure::NoDriver(
            "the CUDA driver reports no device".into(),
        )),
        Err(e) => Err(InitFailure::Driver(e)),
    }
}

/// `cuDriverGetVersion`.
pub fn driver_version() -> DriverResult<i32> {
    require_loaded("cuDriverGetVersion")?;
    written("cuDriverGetVersion", 0, |version| {
        // SAFETY: the library is loaded (checked above); writes one int to a local.
        unsafe { sys::cuDriverGetVersion(version) }
    })
}
