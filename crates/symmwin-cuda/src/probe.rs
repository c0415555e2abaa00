//! Device queries for `symmwin probe` (the CLI prints them), and the per-device
//! handle-type probe.
//!
//! Whether a handle type works is only known by trying: the device attributes say
//! fabric is supported on machines where `cuMemCreate` with it is refused for lack of
//! an IMEX channel. So the probe creates and exports one granularity-sized allocation,
//! once per (device, handle type) per process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use symmwin_device::lock::Recover;

use cudarc::driver::sys;

use super::context::{device, PrimaryContext};
use super::driver::{self, DriverError, DriverResult, PhaseExt};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::HandleType;

/// What `symmwin probe` reports about one device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceReport {
    /// CUDA device ordinal.
    pub ordinal: i32,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability as (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// Whether the driver supports virtual memory management on this device.
    pub vmm_supported: bool,
    /// Whether a real create + export with fabric handles works.
    pub fabric: HandleSupport,
    /// Whether a real create + export with POSIX file descriptors works.
    pub posix_fd: HandleSupport,
    /// Minimum allocation granularity in bytes (POSIX fd allocations).
    pub granularity_min: usize,
    /// Recommended allocation granularity in bytes; symmwin uses this one.
    pub granularity_recommended: usize,
    /// Driver version as the driver encodes it (1000 * major + 10 * minor).
    pub driver_version: i32,
    /// The device's NVLink fabric domain (from NVML), or why it has none.
    pub fabric_domain: super::FabricDomainProbe,
}

/// The outcome of a handle-type probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HandleSupport {
    /// True when create + export succeeded.
    pub works: bool,
    /// The failing call and the driver's error name when it did not, e.g.
    /// `cuMemCreate: CUDA_ERROR_NOT_PERMITTED`.
    pub error: Option<String>,
}

impl HandleSupport {
    fn from_outcome(outcome: DriverResult<()>) -> Self {
        match outcome {
            Ok(()) => HandleSupport {
                works: true,
                error: None,
            },
            Err(e) => HandleSupport {
                works: false,
                error: Some(format!("{}: {}", e.call, e.name())),
            },
        }
    }
}

/// Whether device `a` can map memory of device `b` (always true for `a == b`).
pub fn peer_access(a: i32, b: i32) -> Result<bool> {
    let da = device(a)?;
    let db = device(b)?;
    if a == b {
        return Ok(true);
    }
    driver::device_can_access_peer(da, db).phase(Phase::Probe)
}

/// Everything `symmwin probe` shows about `ordinal`. Retains (and so initialises) the
/// device's primary context for the duration of the handle-type probes.
pub fn probe_device(ordinal: i32) -> Result<DeviceReport> {
    let dev = device(ordinal)?;
    let attr = |a| driver::device_attribute(dev, a).phase(Phase::Probe);
    let name = driver::device_name(dev).phase(Phase::Probe)?;
    let total_memory = driver::device_total_mem(dev).phase(Phase::Probe)?;
    let driver_version = driver::driver_version().phase(Phase::Probe)?;
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let vmm_supported =
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)?
            != 0;
    let mut report = DeviceReport {
        ordinal,
        name,
        compute_capability: (major, minor),
        total_memory,
        vmm_supported,
        fabric: HandleSupport {
            works: false,
            error: Some("VMM not supported".into()),
        },
        posix_fd: HandleSupport {
            works: false,
            error: Some("VMM not supported".into()),
        },
        granularity_min: 0,
        granularity_recommended: 0,
        driver_version,
        fabric_domain: super::read_fabric_domain(ordinal).into(),
    };
    if !vmm_supported {
        return Ok(report);
    }
    let prop = driver::device_prop(
        ordinal,
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
    );
    let granularity = |option| driver::allocation_granularity(&prop, option).phase(Phase::Probe);
    report.granularity_min =
        granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?;
    report.granularity_recommended =
        granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?;
    let ctx = PrimaryContext::retain(ordinal)?;
    report.fabric = HandleSupport::from_outcome(handle_type_works(&ctx, HandleType::Fabric));
    report.posix_fd = HandleSupport::from_outcome(handle_type_works(&ctx, HandleType::PosixFd));
    Ok(report)
}

/// The driver's handle-type flag for `handle_type`.
pub(super) fn cu_handle_type(handle_type: HandleType) -> sys::CUmemAllocationHandleType {
    match handle_type {
        HandleType::PosixFd => {
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        }
        HandleType::Fabric => sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
    }
}

/// Create + export one granularity-sized allocation of `handle_type`, cached per process.
pub(super) fn handle_type_works(ctx: &PrimaryContext, handle_type: HandleType) -> DriverResult<()> {
    type Outcomes = HashMap<(i32, HandleType), DriverResult<()>>;
    static CACHE: OnceLock<Mutex<Outcomes>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // A poisoned cache only means another thread panicked mid-insert of a Copy value;
    // the map itself is still consistent.
    let mut cache = cache.lock().recover();
    // Holding the lock across the probe keeps two threads from probing the same device
    // at once; probes are rare and fast.
    *cache
        .entry((ctx.ordinal, handle_type))
        .or_insert_with(|| try_create_export(ctx, handle_type))
}

fn try_create_export(ctx: &PrimaryContext, handle_type: HandleType) -> DriverResult<()> {
    let _guard = ctx.enter()?;
    let prop = driver::device_prop(ctx.ordinal, cu_handle_type(handle_type));
    driver::create_and_export(&prop)
}

/// The handle type a provider for `ctx` uses under `pref`.
pub(super) fn choose_handle_type(
    ctx: &PrimaryContext,
    pref: symmwin_device::provider::HandlePreference,
) -> Result<HandleType> {
    use symmwin_device::provider::HandlePreference;
    let forced = |handle_type: HandleType, setting: &str| {
        handle_type_works(ctx, handle_type)
            .map(|()| handle_type)
            .map_err(|e| unsupported(ctx.ordinal, handle_type, setting, e))
    };
    match pref {
        HandlePreference::Fd => forced(HandleType::PosixFd, "fd"),
        HandlePreference::Fabric => forced(HandleType::Fabric, "fabric"),
        HandlePreference::Auto => match handle_type_works(ctx, HandleType::Fabric) {
            Ok(()) => Ok(HandleType::Fabric),
            Err(fabric) => {
                tracing::debug!(
                    "device {}: fabric handles unavailable ({}: {}); using POSIX fds",
                    ctx.ordinal,
                    fabric.call,
                    fabric.name()
                );
                forced(HandleType::PosixFd, "auto")
            }
        },
    }
}

fn unsupported(ordinal: i32, handle_type: HandleType, setting: &str, e: DriverError) -> Error {
    Error::new(
        Phase::Probe,
        ErrorKind::Unsupported(format!(
            "device {ordinal} cannot share memory as {handle_type} handles \
             (SYMMWIN_HANDLE_TYPE={setting}): {} failed with {} ({})",
            e.call,
            e.name(),
            e.message()
        )),
    )
}
