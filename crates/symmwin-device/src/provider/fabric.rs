//! Where a device sits on the NVLink fabric, as a provider reports it.

use serde::{Deserialize, Serialize};

/// The NVLink fabric domain of a GPU (NVML's `clusterUuid` and `cliqueId`): GPUs of
/// one domain can import each other's fabric handles (given an IMEX channel).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FabricDomain {
    /// Cluster UUID, 32 hex digits.
    pub cluster_uuid: String,
    /// Clique id within the cluster.
    pub clique_id: u32,
}
