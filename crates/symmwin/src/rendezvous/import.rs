//! Importing every peer's handle before any slot is mapped, so that the slots can then
//! be mapped in one batch.
//!
//! The imports run one after another on purpose: helper threads per rendezvous would
//! leave glibc stacks and malloc arenas behind (the soak test counts mappings), and
//! at world 2 there is only one import to make.

use crate::error::Result;
use crate::provider::{Memory, Provider, SharedHandle};

/// Import each received handle (`None` at our own rank) as `size` bytes, as
/// `(rank, memory)` pairs in rank order; an error names the peer.
pub(crate) fn import_all(
    provider: &dyn Provider,
    handles: Vec<Option<SharedHandle>>,
    size: usize,
) -> Result<Vec<(usize, Box<dyn Memory>)>> {
    handles
        .into_iter()
        .enumerate()
        .filter_map(|(rank, handle)| handle.map(|h| (rank, h)))
        .map(|(rank, handle)| {
            provider
                .import(handle, size)
                .map(|memory| (rank, memory))
                .map_err(|e| e.with_peer(rank))
        })
        .collect()
}
