//! NVML, the driver's management library, loaded at run time: the few calls the
//! fabric-domain query needs, each behind a safe method as the CUDA driver's calls are
//! behind `driver`. Everything `unsafe` about NVML stays in this file.
//!
//! <https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html>

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::marker::PhantomData;

use libloading::{Library, Symbol};

/// `nvmlReturn_t` values this module tells apart.
pub(super) const NVML_SUCCESS: c_uint = 0;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: c_uint = 25;

/// Why an NVML call could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NvmlFailure {
    /// The library could not be loaded.
    Missing(String),
    /// The library lacks an entry point.
    SymbolMissing(&'static str),
    /// A PCI address NVML cannot take (an interior NUL).
    BadPciAddress(String),
    /// A call returned an error status.
    Call {
        call: &'static str,
        status: NvmlStatus,
    },
}

/// An NVML device handle (`nvmlDevice_t`), valid while the [`Nvml`] that found it is
/// initialised, which its lifetime ensures.
pub(super) struct NvmlDevice<'nvml> {
    raw: RawDevice,
    _nvml: PhantomData<&'nvml Nvml>,
}

/// An opaque `nvmlDevice_t`.
type RawDevice = *mut c_void;
type NvmlCall = unsafe extern "C" fn() -> c_uint;
type ErrorStringFn = unsafe extern "C" fn(c_uint) -> *const c_char;
type HandleByPciBusIdFn = unsafe extern "C" fn(*const c_char, *mut RawDevice) -> c_uint;
/// `nvmlDeviceGetGpuFabricInfoV` and `nvmlDeviceGetGpuFabricInfo`: both take a pointer
/// to a struct whose layout the version (or, for the old one, the name) selects.
type FabricInfoFn = unsafe extern "C" fn(RawDevice, *mut c_void) -> c_uint;

/// `nvmlGpuFabricInfo_t`, the struct of the unversioned query.
#[repr(C)]
#[derive(Debug, Default)]
struct FabricInfoV1 {
    cluster_uuid: [u8; 16],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
}

/// `nvmlGpuFabricInfo_v2_t`.
#[repr(C)]
#[derive(Debug, Default)]
struct FabricInfoV2 {
    version: c_uint,
    cluster_uuid: [u8; 16],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
}

/// `nvmlGpuFabricInfo_v3_t` (`nvmlGpuFabricInfoV_t` in the CUDA 13 era headers): the
/// v2 fields, then one more at the end.
#[repr(C)]
#[derive(Debug, Default)]
struct FabricInfoV3 {
    v2: FabricInfoV2,
    health_summary: u8,
}

/// `NVML_STRUCT_VERSION`: the struct's size with the version in the top byte.
const fn struct_version(size: usize, version: u32) -> c_uint {
    size as c_uint | (version << 24)
}

const FABRIC_INFO_V2: c_uint = struct_version(std::mem::size_of::<FabricInfoV2>(), 2);
const FABRIC_INFO_V3: c_uint = struct_version(std::mem::size_of::<FabricInfoV3>(), 3);

/// What NVML reported about a GPU's fabric registration, whichever struct carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FabricInfo {
    pub(super) cluster_uuid: [u8; 16],
    pub(super) status: c_uint,
    pub(super) clique_id: c_uint,
    pub(super) state: u8,
}

macro_rules! fabric_info_from {
    ($($raw:ty),*) => {$(
        impl From<$raw> for FabricInfo {
            fn from(raw: $raw) -> Self {
                FabricInfo {
                    cluster_uuid: raw.cluster_uuid,
                    status: raw.status,
                    clique_id: raw.clique_id,
                    state: raw.state,
                }
            }
        }
    )*};
}
fabric_info_from!(FabricInfoV1, FabricInfoV2);

impl From<FabricInfoV3> for FabricInfo {
    fn from(raw: FabricInfoV3) -> Self {
        raw.v2.into()
    }
}

/// An NVML status with NVML's own description of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlStatus {
    /// The `nvmlReturn_t` value.
    pub code: u32,
    /// `nvmlErrorString` of it, e.g. `Not Supported`.
    pub description: String,
}

impl std::fmt::Display for NvmlStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (NVML status {})", self.description, self.code)
    }
}

/// NVML, loaded and initialised; shut down (NVML counts its initialisations, so other
/// users in the process keep theirs) and unloaded on drop.
pub(super) struct Nvml {
    lib: Library,
}

impl Nvml {
    pub(super) fn open(library: &str) -> Result<Self, NvmlFailure> {
        // SAFETY: loading runs NVML's initialisers, vendor code that ships with the
        // driver and that symmwin must trust to use the GPU at all.
        let lib =
            unsafe { Library::new(library) }.map_err(|e| NvmlFailure::Missing(e.to_string()))?;
        // SAFETY: nvml.h: `nvmlReturn_t nvmlInit_v2(void)`.
        let init: Symbol<NvmlCall> = unsafe { symbol(&lib, "nvmlInit_v2") }?;
        // SAFETY: nvmlInit_v2 takes no arguments and may be called any number of times.
        let code = unsafe { init() };
        // Only a successful initialisation is owed a shutdown: an unbalanced one would
        // undo another NVML user's initialisation in this process.
        if code != NVML_SUCCESS {
            return Err(NvmlFailure::Call {
                call: "nvmlInit_v2",
                status: describe(&lib, code),
            });
        }
        Ok(Nvml { lib })
    }

    /// # Safety
    /// As for [`symbol`].
    unsafe fn symbol<T>(&self, name: &'static str) -> Result<Symbol<'_, T>, NvmlFailure> {
        // SAFETY: a propagation of the caller's assertion.
        unsafe { symbol(&self.lib, name) }
    }

    fn check(&self, call: &'static str, code: c_uint) -> Result<(), NvmlFailure> {
        if code == NVML_SUCCESS {
            return Ok(());
        }
        Err(NvmlFailure::Call {
            call,
            status: self.describe(code),
        })
    }

    pub(super) fn describe(&self, code: c_uint) -> NvmlStatus {
        describe(&self.lib, code)
    }

    /// The GPU at `pci_address` (`domain:bus:device.function`, hex).
    pub(super) fn device(&self, pci_address: &str) -> Result<NvmlDevice<'_>, NvmlFailure> {
        let call = "nvmlDeviceGetHandleByPciBusId_v2";
        // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *,
        // nvmlDevice_t *)`.
        let by_pci: Symbol<HandleByPciBusIdFn> = unsafe { self.symbol(call) }?;
        let address =
            CString::new(pci_address).map_err(|e| NvmlFailure::BadPciAddress(e.to_string()))?;
        let mut device: RawDevice = std::ptr::null_mut();
        // SAFETY: NVML reads the NUL-terminated address and writes one handle to a local.
        let code = unsafe { by_pci(address.as_ptr(), &mut device) };
        self.check(call, code)?;
        Ok(NvmlDevice {
            raw: device,
            _nvml: PhantomData,
        })
    }

    /// The fabric info of `device`: the versioned query (v3, then v2 for drivers that
    /// know only v2), or the unversioned one where the versioned query is missing.
    pub(super) fn fabric_info(&self, device: &NvmlDevice<'_>) -> Result<FabricInfo, NvmlFailure> {
        let device = device.raw;
        let versioned = "nvmlDeviceGetGpuFabricInfoV";
        // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t,
        // nvmlGpuFabricInfoV_t *)`, the struct pointer taken as `void *`.
        let Ok(query) = (unsafe { self.symbol::<FabricInfoFn>(versioned) }) else {
            let call = "nvmlDeviceGetGpuFabricInfo";
            // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t,
            // nvmlGpuFabricInfo_t *)`, the struct pointer taken as `void *`.
            let query: Symbol<FabricInfoFn> = unsafe { self.symbol(call) }?;
            let mut v1 = FabricInfoV1::default();
            // SAFETY: `device` is a live NVML handle (its lifetime is this `Nvml`'s); NVML writes one nvmlGpuFabricInfo_t.
            let code = unsafe { query(device, (&raw mut v1).cast()) };
            return self.check(call, code).map(|()| v1.into());
        };
        let mut v3 = FabricInfoV3 {
            v2: FabricInfoV2 {
                version: FABRIC_INFO_V3,
                ..FabricInfoV2::default()
            },
            ..FabricInfoV3::default()
        };
        // SAFETY: `device` is a live NVML handle (its lifetime is this `Nvml`'s); the version tells NVML the struct's
        // layout and size, and it writes no more than that.
        let code = unsafe { query(device, (&raw mut v3).cast()) };
        if code != NVML_ERROR_ARGUMENT_VERSION_MISMATCH {
            return self.check(versioned, code).map(|()| v3.into());
        }
        let mut v2 = FabricInfoV2 {
            version: FABRIC_INFO_V2,
            ..FabricInfoV2::default()
        };
        // SAFETY: as above, with the v2 layout.
        let code = unsafe { query(device, (&raw mut v2).cast()) };
        self.check(versioned, code).map(|()| v2.into())
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: nvml.h: `nvmlReturn_t nvmlShutdown(void)`.
        let Ok(shutdown) = (unsafe { self.symbol::<NvmlCall>("nvmlShutdown") }) else {
            return;
        };
        // SAFETY: balances the successful nvmlInit_v2 in `open`; no NVML handle of
        // ours outlives `self`.
        let code = unsafe { shutdown() };
        if code != NVML_SUCCESS {
            tracing::debug!("nvmlShutdown failed: {}", self.describe(code));
        }
    }
}

/// The entry point `name` of `lib`, typed as `T`.
///
/// # Safety
/// `T` must be the C prototype of `name` in nvml.h (a struct pointer may be taken as
/// `*mut c_void`, which has the same ABI).
pub(super) unsafe fn symbol<'lib, T>(
    lib: &'lib Library,
    name: &'static str,
) -> Result<Symbol<'lib, T>, NvmlFailure> {
    // SAFETY: a propagation of the caller's assertion.
    unsafe { lib.get::<T>(name) }.map_err(|_| NvmlFailure::SymbolMissing(name))
}

/// `code` with NVML's description of it.
fn describe(lib: &Library, code: c_uint) -> NvmlStatus {
    // SAFETY: nvml.h: `const char *nvmlErrorString(nvmlReturn_t)`.
    let description = unsafe { symbol::<ErrorStringFn>(lib, "nvmlErrorString") }
        .ok()
        .and_then(|error_string| {
            // SAFETY: nvmlErrorString returns a pointer to a static NUL-terminated
            // string inside NVML (or null), for any code.
            let ptr = unsafe { error_string(code) };
            // SAFETY: non-null pointers from nvmlErrorString are static C strings.
            (!ptr.is_null()).then(|| unsafe { CStr::from_ptr(ptr) }.to_string_lossy())
        })
        .map_or_else(|| "unknown".to_owned(), |s| s.into_owned());
    NvmlStatus { code, description }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_nvml_h() {
        // nvml.h: nvmlGpuFabricInfo_v2 == 0x02000024, nvmlGpuFabricInfo_v3 == 0x03000028.
        assert_eq!(std::mem::size_of::<FabricInfoV1>(), 28);
        assert_eq!(std::mem::size_of::<FabricInfoV2>(), 36);
        assert_eq!(std::mem::size_of::<FabricInfoV3>(), 40);
        assert_eq!(FABRIC_INFO_V2, 0x0200_0024);
        assert_eq!(FABRIC_INFO_V3, 0x0300_0028);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, v2.cluster_uuid), 4);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, v2.status), 20);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, v2.clique_id), 24);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, v2.state), 28);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, v2.health_mask), 32);
        assert_eq!(std::mem::offset_of!(FabricInfoV3, health_summary), 36);
        assert_eq!(std::mem::offset_of!(FabricInfoV1, state), 24);
    }
}
