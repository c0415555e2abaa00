//! Device queries for `symmwin probe`, and the per-device handle-type probe.
//!
//! Whether a handle type works is only known by trying: the device attributes say
//! fabric is supported on machines where `cuMemCreate` with it is refused for lack of
//! an IMEX channel. So the probe creates and exports one granularity-sized allocation,
//! once per (device, handle type) per process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;

use super::driver::{self, CtxGuard, DriverError, DriverResult, PhaseExt};
use crate::error::{Error, ErrorKind, Phase, Result};
use crate::provider::HandleType;

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

/// A human-readable table of `devices`, one row per device, for `symmwin probe`.
pub fn report_table(devices: &[DeviceReport]) -> String {
    use std::fmt::Write;
    let support = |h: &HandleSupport| match (&h.works, &h.error) {
        (true, _) => "yes".to_owned(),
        (false, Some(e)) => format!("no ({e})"),
        (false, None) => "no".to_owned(),
    };
    let mut out = String::new();
    if devices.is_empty() {
        out.push_str("no CUDA devices");
        return out;
    }
    for d in devices {
        let _ = writeln!(
            out,
            "cuda:{} {} (sm_{}{}, {}, driver {}.{})",
            d.ordinal,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            size(d.total_memory),
            d.driver_version / 1000,
            d.driver_version % 1000 / 10,
        );
        if !d.vmm_supported {
            let _ = writeln!(out, "  VMM: not supported");
            continue;
        }
        let _ = writeln!(
            out,
            "  granularity: {} minimum, {} recommended",
            size(d.granularity_min),
            size(d.granularity_recommended)
        );
        let _ = writeln!(out, "  fabric handles: {}", support(&d.fabric));
        let _ = writeln!(out, "  POSIX fd handles: {}", support(&d.posix_fd));
    }
    out.truncate(out.trim_end().len());
    out
}

fn size(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Number of CUDA devices visible to this process.
pub fn device_count() -> Result<i32> {
    driver::ensure_loaded()?;
    // SAFETY: the driver is loaded and initialised.
    unsafe { driver::device_count() }.phase(Phase::Probe)
}

/// Whether device `a` can map memory of device `b` (always true for `a == b`).
pub fn peer_access(a: i32, b: i32) -> Result<bool> {
    let da = device(a)?;
    let db = device(b)?;
    if a == b {
        return Ok(true);
    }
    // SAFETY: both devices come from cuDeviceGet.
    unsafe { driver::device_can_access_peer(da, db) }.phase(Phase::Probe)
}

/// Everything `symmwin probe` shows about `ordinal`. Retains (and so initialises) the
/// device's primary context for the duration of the handle-type probes.
pub fn probe_device(ordinal: i32) -> Result<DeviceReport> {
    let dev = device(ordinal)?;
    // SAFETY: `dev` comes from cuDeviceGet on a loaded driver.
    let attr = |a| unsafe { driver::device_attribute(dev, a) }.phase(Phase::Probe);
    // SAFETY: as above.
    let name = unsafe { driver::device_name(dev) }.phase(Phase::Probe)?;
    // SAFETY: as above.
    let total_memory = unsafe { driver::device_total_mem(dev) }.phase(Phase::Probe)?;
    // SAFETY: `device` above loaded and initialised the driver.
    let driver_version = unsafe { driver::driver_version() }.phase(Phase::Probe)?;
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
    };
    if !vmm_supported {
        return Ok(report);
    }
    let prop = driver::device_prop(
        ordinal,
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
    );
    let granularity = |option| {
        // SAFETY: `prop` describes this device.
        unsafe { driver::allocation_granularity(&prop, option) }.phase(Phase::Probe)
    };
    report.granularity_min =
        granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?;
    report.granularity_recommended =
        granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?;
    let ctx = PrimaryContext::retain(ordinal)?;
    report.fabric = HandleSupport::from_outcome(handle_type_works(&ctx, HandleType::Fabric));
    report.posix_fd = HandleSupport::from_outcome(handle_type_works(&ctx, HandleType::PosixFd));
    Ok(report)
}

/// `cuDeviceGet` on a loaded driver, with a readable error for a bad ordinal.
pub(super) fn device(ordinal: i32) -> Result<sys::CUdevice> {
    driver::ensure_loaded()?;
    let count = device_count()?;
    if ordinal < 0 || ordinal >= count {
        return Err(Error::new(
            Phase::Probe,
            ErrorKind::InvalidArgument(format!(
                "CUDA device {ordinal} does not exist ({count} visible)"
            )),
        ));
    }
    // SAFETY: the driver is initialised and the ordinal is in range.
    unsafe { driver::device_get(ordinal) }.phase(Phase::Probe)
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

/// A retained primary context: the one torch and the CUDA runtime use, so retaining it
/// shares their context rather than creating a rival one.
#[derive(Debug)]
pub(super) struct PrimaryContext {
    pub(super) ordinal: i32,
    pub(super) cu_device: sys::CUdevice,
    pub(super) ctx: sys::CUcontext,
}

// SAFETY: a CUDA context handle may be made current on, and used from, any thread; the
// handle itself is an immutable token.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; nothing here is mutated after construction.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    pub(super) fn retain(ordinal: i32) -> Result<Self> {
        let cu_device = device(ordinal)?;
        // SAFETY: `cu_device` comes from cuDeviceGet; Drop balances the retain.
        let ctx = unsafe { driver::primary_ctx_retain(cu_device) }.phase(Phase::Probe)?;
        Ok(PrimaryContext {
            ordinal,
            cu_device,
            ctx,
        })
    }

    /// Makes this context current on the calling thread until the guard drops.
    #[inline]
    pub(super) fn enter(&self) -> DriverResult<CtxGuard<'_>> {
        // SAFETY: the context stays retained while `self` lives, and the guard borrows
        // `self`.
        unsafe { CtxGuard::enter(self.ctx) }
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `retain`; every object that used the context
        // holds an Arc to it, so none is left.
        if let Err(e) = unsafe { driver::primary_ctx_release(self.cu_device) } {
            tracing::warn!(
                "releasing the primary context of device {} failed: {}",
                self.ordinal,
                e.name()
            );
        }
    }
}

/// Create + export one granularity-sized allocation of `handle_type`, cached per process.
pub(super) fn handle_type_works(ctx: &PrimaryContext, handle_type: HandleType) -> DriverResult<()> {
    type Outcomes = HashMap<(i32, HandleType), DriverResult<()>>;
    static CACHE: OnceLock<Mutex<Outcomes>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // A poisoned cache only means another thread panicked mid-insert of a Copy value;
    // the map itself is still consistent.
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    // Holding the lock across the probe keeps two threads from probing the same device
    // at once; probes are rare and fast.
    *cache
        .entry((ctx.ordinal, handle_type))
        .or_insert_with(|| try_create_export(ctx, handle_type))
}

fn try_create_export(ctx: &PrimaryContext, handle_type: HandleType) -> DriverResult<()> {
    let _guard = ctx.enter()?;
    let prop = driver::device_prop(ctx.ordinal, cu_handle_type(handle_type));
    // SAFETY: `prop` describes a device of the current context.
    let size = unsafe {
        driver::allocation_granularity(
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }?;
    // SAFETY: `size` is the granularity for `prop`; the handle is released below.
    let handle = unsafe { driver::mem_create(size, &prop) }?;
    let exported = match handle_type {
        // SAFETY: `handle` is live and was created with POSIX fds requested; the
        // exported fd is closed when the OwnedFd drops.
        HandleType::PosixFd => unsafe { driver::mem_export_fd(handle) }.map(drop),
        // SAFETY: `handle` is live and was created with fabric handles requested.
        HandleType::Fabric => unsafe { driver::mem_export_fabric(handle) }.map(drop),
    };
    // SAFETY: `handle` is live and unmapped, and not used again.
    let released = unsafe { driver::mem_release(handle) };
    exported.and(released)
}

/// The handle type a provider for `ctx` uses under `pref`.
pub(super) fn choose_handle_type(
    ctx: &PrimaryContext,
    pref: crate::config::HandlePreference,
) -> Result<HandleType> {
    use crate::config::HandlePreference;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_failures_by_name() {
        let report = DeviceReport {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            total_memory: 150_754_820_096,
            vmm_supported: true,
            fabric: HandleSupport {
                works: false,
                error: Some("cuMemCreate: CUDA_ERROR_NOT_PERMITTED".into()),
            },
            posix_fd: HandleSupport {
                works: true,
                error: None,
            },
            granularity_min: 2 << 20,
            granularity_recommended: 2 << 20,
            driver_version: 13000,
        };
        let table = report_table(&[report]);
        assert!(
            table.contains("cuda:0 NVIDIA H200 (sm_90, 140.4 GiB, driver 13.0)"),
            "{table}"
        );
        assert!(
            table.contains("granularity: 2 MiB minimum, 2 MiB recommended"),
            "{table}"
        );
        assert!(table.contains("fabric handles: no (cuMemCreate: CUDA_ERROR_NOT_PERMITTED)"));
        assert!(table.contains("POSIX fd handles: yes"));
        assert_eq!(report_table(&[]), "no CUDA devices");
    }
}
