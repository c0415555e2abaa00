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

use std::ffi::c_uint;
use std::sync::OnceLock;

use cudarc::driver::sys::CUdevice_attribute;

use super::driver::{self, PhaseExt};
use super::nvml::{FabricInfo, Nvml, NvmlFailure, NvmlStatus, NVML_SUCCESS};
use symmwin_device::error::Phase;
use symmwin_device::provider::FabricDomain;
use symmwin_device::provider::HandleType;

/// The NVML library every driver installation ships (the unversioned name is a
/// development symlink).
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// `nvmlGpuFabricState_t`: registration with the fabric manager has finished.
const FABRIC_STATE_COMPLETED: u8 = 3;

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

/// The PCI address of CUDA device `ordinal`, from the driver's attributes.
fn device_pci_address(ordinal: i32) -> symmwin_device::Result<String> {
    let device = super::context::device(ordinal)?;
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
    let info = nvml.fabric_info(&device)?;
    decode(&info, |code| nvml.describe(code))
}

impl From<NvmlFailure> for NoFabricDomain {
    fn from(failure: NvmlFailure) -> Self {
        match failure {
            NvmlFailure::Missing(why) => NoFabricDomain::NvmlMissing(why),
            NvmlFailure::SymbolMissing(name) => NoFabricDomain::SymbolMissing(name),
            NvmlFailure::BadPciAddress(why) => NoFabricDomain::PciAddress(why),
            NvmlFailure::Call { call, status } => NoFabricDomain::Nvml { call, status },
        }
    }
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
