//! Collective and one-sided operations over windows: the MoE all-to-all-v family
//! ([`all_to_all_v`]), [`all_to_all`], [`broadcast`], [`put_or_get`], put with signal
//! ([`put_with_signal`], [`put_signal`], [`wait_signal`], [`wait_for_signal`]) and
//! [`tile_reduce`], with torch 2.11's semantics (`torch.ops.symm_mem.*` of its NVSHMEM
//! backend). Each takes its windows as [`Operand`]s and its choices as [`OpOptions`].
//!
//! Three layers, each knowing only the one below:
//! - `collective`: the safe API over [`crate::Window`]s and byte offsets. It checks
//!   every operand (same group, inside its window, aligned split tables of the right
//!   length) and builds the flat-layout arguments.
//! - `DeviceOps` (symmwin-device): what a provider implements, over raw flat-layout
//!   addresses and the pads to synchronize on.
//! - the implementations: symmwin-host's `HostOps` (CPU copies, pad signals), and the
//!   CUDA provider's kernels and copy-engine paths; on a group that spans hosts,
//!   `spanning::SpanningOps` serves the mapped ranks through the window and the others
//!   through the group's process-group backend, for either provider.
//!
//! `plan` (symmwin-device) holds the split arithmetic every implementation must agree
//! with.

pub(crate) mod collective;
mod rank;
mod spanning;

pub use collective::{
    all_to_all, all_to_all_v, broadcast, put_or_get, put_signal, put_with_signal, tile_reduce,
    wait_for_signal, wait_for_signal_at, wait_signal, OpOptions, Operand,
};
pub use rank::Rank;
pub use symmwin_device::engine::ENGINE_ENV;
pub use symmwin_device::provider::device_ops::plan::Shape;
pub(crate) use symmwin_device::provider::device_ops::DeviceOps;
pub use symmwin_device::provider::device_ops::{
    DType, ElemType, Elements, Engine, ReduceOp, Rows, Tile,
};

use symmwin_device::error::{Error, Result};
use symmwin_device::provider::PadLayout;

/// The pad channel collective ops synchronize on: the last one a pad holds at this
/// world size, far from the low channels users and torch's kernels signal on.
pub(crate) fn ops_channel(pads: &PadLayout) -> Result<usize> {
    pads.channels().checked_sub(1).ok_or_else(|| {
        Error::invalid(format!(
            "a signal pad of {} bytes holds no channel at world size {}",
            pads.len(),
            pads.world()
        ))
    })
}
