//! The NVLink fabric domain of a CUDA device, as NVML reports it.
//!
//! GPUs of one multi-node NVLink domain (one cluster UUID and clique id) can import
//! each other's fabric handles across hosts. Only NVML knows the domain, and NVML is
//! optional: `libnvidia-ml.so.1` is loaded at run time, and a machine without it, a
//! driver without the fabric query, or a GPU outside any fabric simply has no domain.
//! Nothing here ever fails the provider; [`NoFabricDomain`] says why there is none.
//!
//! NVML finds the GPU by its PCI address, which the CUDA driver gives as device
//! attributes (a MIG instance reports its parent GPU's address, and the fabric is the
//! parent GPU's).

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

use cudarc::driver::sys::CUdevice_attribute;
use libloading::{Library, Symbol};

use super::driver::{self, PhaseExt};
use crate::error::Phase;
use crate::provider::HandleType;
use crate::rendezvous::locality::FabricDomain;

/// The NVML library every driver installation ships (the unversioned name is a
/// development symlink).
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// `nvmlReturn_t` values this module tells apart.
const NVML_SUCCESS: c_uint = 0;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: c_uint = 25;

/// `nvmlGpuFabricState_t`: registration with the fabric manager has finished.
const FABRIC_STATE_COMPLETED: u8 = 3;

/// An opaque `nvmlDevice_t`.
type NvmlDevice = *mut c_void;
type NvmlCall = unsafe extern "C" fn() -> c_uint;
type ErrorStringFn = unsafe extern "C" fn(c_uint) -> *const c_char;
type HandleByPciBusIdFn = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> c_uint;
/// `nvmlDeviceGetGpuFabricInfoV` and `nvmlDeviceGetGpuFabricInfo`: both take a pointer
/// to a struct whose layout the version (or, for the old one, the name) selects.
type FabricInfoFn = unsafe extern "C" fn(NvmlDevice, *mut c_void) -> c_uint;

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
struct FabricInfo {
    cluster_uuid: [u8; 16],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
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

/// Why a device has no fabric domain symmwin can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoFabricDomain {
    /// The provider shares memory as POSIX fds, which never leave the host: its
    /// domain would decide nothing, so NVML is not asked.
    #[error("not read: the provider shares memory as {0} handles")]
    NotFabricHandles(HandleType),
    /// NVML could not be loaded.
    #[error("NVML could not be loaded ({0})")]
    NvmlMissing(String),
    /// NVML lacks an entry point (a driver older than the query).
    #[error("NVML lacks {0} (driver too old for the fabric query)")]
    SymbolMissing(&'static str),
    /// The CUDA driver could not give the device's PCI address.
    #[error("the device's PCI address is unknown: {0}")]
    PciAddress(String),
    /// An NVML call failed.
    #[error("{call} failed: {status}")]
    Nvml {
        /// The NVML entry point.
        call: &'static str,
        /// What it returned.
        status: NvmlStatus,
    },
    /// The GPU has not (or not yet) registered with an NVLink fabric.
    #[error("fabric state is {}", state_name(*.0))]
    NotRegistered(u8),
    /// Registration finished with an error.
    #[error("fabric registration failed: {0}")]
    RegistrationFailed(NvmlStatus),
    /// Registration finished, but in no cluster (a single-node NVLink system).
    #[error("registered in no cluster (cluster UUID all zero, clique {clique_id})")]
    NoCluster {
        /// The clique id NVML reported.
        clique_id: u32,
    },
}

fn state_name(state: u8) -> String {
    match state {
        0 => "NOT_SUPPORTED (the GPU is in no NVLink fabric)".into(),
        1 => "NOT_STARTED".into(),
        2 => "IN_PROGRESS".into(),
        FABRIC_STATE_COMPLETED => "COMPLETED".into(),
        other => format!("unknown ({other})"),
    }
}

/// The domain in `info`, when registration completed successfully in a real cluster.
/// `describe` names an NVML status (NVML's own strings need the loaded library).
fn decode(
    info: &FabricInfo,
    describe: impl Fn(c_uint) -> NvmlStatus,
) -> Result<FabricDomain, NoFabricDomain> {
    if info.state != FABRIC_STATE_COMPLETED {
        return Err(NoFabricDomain::NotRegistered(info.state));
    }
    // NVML documents the status as meaningful only once the state is COMPLETED.
    if info.status != NVML_SUCCESS {
        return Err(NoFabricDomain::RegistrationFailed(describe(info.status)));
    }
    // A GPU registered outside any multi-node cluster reports the zero UUID: taking it
    // for a domain would join unrelated machines.
    if info.cluster_uuid.iter().all(|&b| b == 0) {
        return Err(NoFabricDomain::NoCluster {
            clique_id: info.clique_id,
        });
    }
    Ok(FabricDomain {
        cluster_uuid: hex(&info.cluster_uuid),
        clique_id: info.clique_id,
    })
}

/// Lower-case hex digits of `bytes`, two per byte.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The PCI address as NVML parses it (`domain:bus:device.function`, hex).
fn pci_address(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:08x}:{bus:02x}:{device:02x}.0")
}

/// NVML, loaded and initialised; shut down (NVML counts its initialisations, so other
/// users in the process keep theirs) and unloaded on drop.
struct Nvml {
    lib: Library,
}

impl Nvml {
    fn open(library: &str) -> Result<Self, NoFabricDomain> {
        // SAFETY: loading runs NVML's initialisers, vendor code that ships with the
        // driver and that symmwin must trust to use the GPU at all.
        let lib = unsafe { Library::new(library) }
            .map_err(|e| NoFabricDomain::NvmlMissing(e.to_string()))?;
        // SAFETY: nvml.h: `nvmlReturn_t nvmlInit_v2(void)`.
        let init: Symbol<NvmlCall> = unsafe { symbol(&lib, "nvmlInit_v2") }?;
        // SAFETY: nvmlInit_v2 takes no arguments and may be called any number of times.
        let code = unsafe { init() };
        // Only a successful initialisation is owed a shutdown: an unbalanced one would
        // undo another NVML user's initialisation in this process.
        if code != NVML_SUCCESS {
            return Err(NoFabricDomain::Nvml {
                call: "nvmlInit_v2",
                status: describe(&lib, code),
            });
        }
        Ok(Nvml { lib })
    }

    /// # Safety
    /// As for [`symbol`].
    unsafe fn symbol<T>(&self, name: &'static str) -> Result<Symbol<'_, T>, NoFabricDomain> {
        // SAFETY: a propagation of the caller's assertion.
        unsafe { symbol(&self.lib, name) }
    }

    fn check(&self, call: &'static str, code: c_uint) -> Result<(), NoFabricDomain> {
        if code == NVML_SUCCESS {
            return Ok(());
        }
        Err(NoFabricDomain::Nvml {
            call,
            status: self.describe(code),
        })
    }

    fn describe(&self, code: c_uint) -> NvmlStatus {
        describe(&self.lib, code)
    }

    fn device(&self, pci_address: &str) -> Result<NvmlDevice, NoFabricDomain> {
        let call = "nvmlDeviceGetHandleByPciBusId_v2";
        // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *,
        // nvmlDevice_t *)`.
        let by_pci: Symbol<HandleByPciBusIdFn> = unsafe { self.symbol(call) }?;
        let address =
            CString::new(pci_address).map_err(|e| NoFabricDomain::PciAddress(e.to_string()))?;
        let mut device: NvmlDevice = std::ptr::null_mut();
        // SAFETY: NVML reads the NUL-terminated address and writes one handle to a local.
        let code = unsafe { by_pci(address.as_ptr(), &mut device) };
        self.check(call, code)?;
        Ok(device)
    }

    /// The fabric info of `device`: the versioned query (v3, then v2 for drivers that
    /// know only v2), or the unversioned one where the versioned query is missing.
    fn fabric_info(&self, device: NvmlDevice) -> Result<FabricInfo, NoFabricDomain> {
        let versioned = "nvmlDeviceGetGpuFabricInfoV";
        // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t,
        // nvmlGpuFabricInfoV_t *)`, the struct pointer taken as `void *`.
        let Ok(query) = (unsafe { self.symbol::<FabricInfoFn>(versioned) }) else {
            let call = "nvmlDeviceGetGpuFabricInfo";
            // SAFETY: nvml.h: `nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t,
            // nvmlGpuFabricInfo_t *)`, the struct pointer taken as `void *`.
            let query: Symbol<FabricInfoFn> = unsafe { self.symbol(call) }?;
            let mut v1 = FabricInfoV1::default();
            // SAFETY: `device` is a live NVML handle; NVML writes one nvmlGpuFabricInfo_t.
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
        // SAFETY: `device` is a live NVML handle; the version tells NVML the struct's
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
unsafe fn symbol<'lib, T>(
    lib: &'lib Library,
    name: &'static str,
) -> Result<Symbol<'lib, T>, NoFabricDomain> {
    // SAFETY: a propagation of the caller's assertion.
    unsafe { lib.get::<T>(name) }.map_err(|_| NoFabricDomain::SymbolMissing(name))
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

/// The PCI address of CUDA device `ordinal`, from the driver's attributes.
fn device_pci_address(ordinal: i32) -> crate::Result<String> {
    let device = super::probe::device(ordinal)?;
    let attr = |a| driver::device_attribute(device, a).phase(Phase::Probe);
    Ok(pci_address(
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    ))
}

/// The NVLink fabric domain of CUDA device `ordinal`, asking NVML now. A domain only
/// when registration completed successfully in a cluster; otherwise why not.
pub fn read_fabric_domain(ordinal: i32) -> Result<FabricDomain, NoFabricDomain> {
    let address =
        device_pci_address(ordinal).map_err(|e| NoFabricDomain::PciAddress(e.to_string()))?;
    read_through(NVML_LIBRARY, &address)
}

/// The fabric domain of the GPU at `pci_address`, through the NVML at `library`.
fn read_through(library: &str, pci_address: &str) -> Result<FabricDomain, NoFabricDomain> {
    let nvml = Nvml::open(library)?;
    let device = nvml.device(pci_address)?;
    let info = nvml.fabric_info(device)?;
    decode(&info, |code| nvml.describe(code))
}

/// A provider's fabric domain, read from NVML the first time it is asked for.
#[derive(Debug, Default)]
pub(super) struct CachedFabricDomain(OnceLock<Option<FabricDomain>>);

impl CachedFabricDomain {
    /// The domain of device `ordinal` sharing memory as `handle_type`; logs why there
    /// is none (at debug level) the one time it is read.
    pub(super) fn get(&self, ordinal: i32, handle_type: HandleType) -> Option<FabricDomain> {
        self.0
            .get_or_init(|| {
                let read = match handle_type {
                    HandleType::Fabric => read_fabric_domain(ordinal),
                    HandleType::PosixFd => Err(NoFabricDomain::NotFabricHandles(handle_type)),
                };
                match read {
                    Ok(domain) => {
                        tracing::debug!(
                            "CUDA device {ordinal}: NVLink fabric domain: cluster {} clique {}",
                            domain.cluster_uuid,
                            domain.clique_id
                        );
                        Some(domain)
                    }
                    Err(why) => {
                        tracing::debug!("CUDA device {ordinal}: no NVLink fabric domain: {why}");
                        None
                    }
                }
            })
            .clone()
    }
}

/// What `symmwin probe` shows about a device's fabric domain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FabricDomainProbe {
    /// The domain, when the device is registered in one.
    pub domain: Option<FabricDomain>,
    /// Why there is none, when there is none.
    pub none_because: Option<String>,
}

impl From<Result<FabricDomain, NoFabricDomain>> for FabricDomainProbe {
    fn from(read: Result<FabricDomain, NoFabricDomain>) -> Self {
        match read {
            Ok(domain) => FabricDomainProbe {
                domain: Some(domain),
                none_because: None,
            },
            Err(why) => FabricDomainProbe {
                domain: None,
                none_because: Some(why.to_string()),
            },
        }
    }
}

#[cfg(test)]
mod fake_nvml_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: c_uint) -> NvmlStatus {
        NvmlStatus {
            code,
            description: format!("status {code}"),
        }
    }

    fn info(state: u8, status: c_uint, cluster_uuid: [u8; 16], clique_id: u32) -> FabricInfo {
        FabricInfo {
            cluster_uuid,
            status,
            clique_id,
            state,
        }
    }

    const UUID: [u8; 16] = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00, 0x10, 0x20, 0x30, 0xf0, 0x0f, 0xff,
        0x7e,
    ];

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

    #[test]
    fn completed_registration_in_a_cluster_is_a_domain() {
        let domain = decode(&info(3, 0, UUID, 7), status).unwrap();
        assert_eq!(domain.cluster_uuid, "0123456789abcdef00102030f00fff7e");
        assert_eq!(domain.cluster_uuid.len(), 32);
        assert_eq!(domain.clique_id, 7);
    }

    #[test]
    fn unfinished_states_are_no_domain() {
        for state in [0, 1, 2, 9] {
            let err = decode(&info(state, 0, UUID, 7), status).unwrap_err();
            assert_eq!(err, NoFabricDomain::NotRegistered(state));
        }
        let err = decode(&info(0, 3, [0; 16], 0), status).unwrap_err();
        assert!(err.to_string().contains("NOT_SUPPORTED"), "{err}");
        let err = decode(&info(2, 0, UUID, 7), status).unwrap_err();
        assert_eq!(err.to_string(), "fabric state is IN_PROGRESS");
    }

    #[test]
    fn a_failed_registration_is_no_domain_and_names_the_status() {
        let err = decode(&info(3, 999, UUID, 7), status).unwrap_err();
        assert_eq!(err, NoFabricDomain::RegistrationFailed(status(999)));
        assert!(err.to_string().contains("NVML status 999"), "{err}");
    }

    #[test]
    fn the_zero_cluster_uuid_is_no_domain() {
        let err = decode(&info(3, 0, [0; 16], 0), status).unwrap_err();
        assert_eq!(err, NoFabricDomain::NoCluster { clique_id: 0 });
        let mut one_bit = [0; 16];
        one_bit[15] = 1;
        let domain = decode(&info(3, 0, one_bit, 0), status).unwrap();
        assert_eq!(domain.cluster_uuid, "00000000000000000000000000000001");
    }

    #[test]
    fn hex_and_pci_address_formats() {
        assert_eq!(hex(&[0x00, 0x0a, 0xff]), "000aff");
        assert_eq!(pci_address(0, 0x18, 0), "00000000:18:00.0");
        assert_eq!(pci_address(0x1_0000, 0xc1, 0x1f), "00010000:c1:1f.0");
    }

    #[test]
    fn fd_providers_do_not_read_the_domain() {
        let cache = CachedFabricDomain::default();
        assert_eq!(cache.get(0, HandleType::PosixFd), None);
        assert_eq!(cache.0.get(), Some(&None));
    }

    #[test]
    fn probe_report_carries_the_domain_or_the_reason() {
        let found = FabricDomainProbe::from(decode(&info(3, 0, UUID, 7), status));
        assert_eq!(found.domain.map(|d| d.clique_id), Some(7));
        assert_eq!(found.none_because, None);
        let none = FabricDomainProbe::from(Err(NoFabricDomain::SymbolMissing("nvmlInit_v2")));
        assert_eq!(none.domain, None);
        assert_eq!(
            none.none_because.as_deref(),
            Some("NVML lacks nvmlInit_v2 (driver too old for the fabric query)")
        );
    }
}
