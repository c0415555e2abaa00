//! Collective and one-sided operations over windows: the MoE all-to-all-v family,
//! all-to-all, broadcast, put/get, put with signal, and tile reduce, with torch 2.11's
//! semantics (`torch.ops.symm_mem.*` of its NVSHMEM backend).
//!
//! Three layers, each knowing only the one below:
//! - [`collective`]: the safe API over [`crate::Window`]s and byte offsets. It checks
//!   every operand (same group, inside its window, aligned split tables of the right
//!   length) and builds the flat-layout arguments.
//! - [`DeviceOps`]: what a provider implements, over raw flat-layout addresses
//!   ([`SymmBuf`]) and the pads to synchronize on ([`OpContext`]).
//! - the implementations: [`host::HostOps`] (CPU copies, pad signals), and the CUDA
//!   provider's kernels and copy-engine paths; on a group that spans hosts,
//!   `spanning::SpanningOps` serves the mapped ranks through the window and the others
//!   through the group's process-group backend, for either provider.
//!
//! [`plan`] holds the split arithmetic every implementation must agree with.

pub mod collective;
mod rank;
mod spanning;

pub use crate::provider::device_ops::plan;
pub use crate::provider::device_ops::{
    DType, DeviceOps, ElemType, Elements, Engine, ReduceOp, Rows, Tile,
};
pub use collective::{OpOptions, Operand};
pub use rank::Rank;

use crate::error::{Error, Result};
use crate::provider::PadLayout;

/// The pad channel collective ops synchronize on: the last one a pad holds at this
/// world size, far from the low channels users and torch's kernels signal on.
pub fn ops_channel(pads: &PadLayout) -> Result<usize> {
    pads.channels().checked_sub(1).ok_or_else(|| {
        Error::invalid(format!(
            "a signal pad of {} bytes holds no channel at world size {}",
            pads.len(),
            pads.world()
        ))
    })
}
