//! The signal-pad part of a rendezvous: what a request says about this rank's pad
//! pools, and claiming the slot every rank agrees on (growing the pools when none is
//! free everywhere).

use super::publish::PadAsk;
use super::request::Request;
use super::reuse::Own;
use super::run::Rendezvous;
use crate::signal::pad_pool::{self, PadLease, PoolWindow};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

impl Rendezvous<'_> {
    /// Pick the lowest pad slot free on every rank, growing the pool when none is.
    pub(super) fn claim_pad(&mut self, requests: &[Request], pad_size: usize) -> Result<PadLease> {
        let bitmaps: Vec<&[u64]> = requests.iter().map(|r| r.pad_free.as_slice()).collect();
        let slot = match pad_pool::common_free_slot(&bitmaps) {
            Some(slot) => slot,
            None => self.grow_pads(requests[0].pad_pools, pad_size)?,
        };
        self.shared.pads.take(pad_size, slot).ok_or_else(|| {
            Error::new(
                Phase::Map,
                ErrorKind::Mismatch {
                    field: "pad_free",
                    detail: format!("slot {slot} agreed by all ranks is not free here"),
                },
            )
        })
    }

    /// Add a pool of `pad_size` pads to the `pools` every rank has (a collective
    /// rendezvous of its own); the first slot of the new pool.
    fn grow_pads(&mut self, pools: usize, pad_size: usize) -> Result<usize> {
        let info = self.shared.provider.info();
        let marks = mark_bytes(info.kind);
        let bytes = pad_pool::pool_bytes(pad_size, info.granularity, marks)?;
        let memory = self.shared.provider.create(bytes)?;
        let pool_window = self.exchange(Own::Pool(memory.as_ref()), bytes, &PadAsk::none())?;
        self.shared.pads.grow(
            pad_size,
            PoolWindow {
                _span: pool_window.span,
                layout: pool_window.layout,
            },
            marks,
        );
        Ok(pools * pad_pool::slots_per_pool(bytes, pad_size, marks))
    }

    /// Scrub this rank's pads of every slot that each rank offers free or to scrub
    /// (no rank has a window on it): every rank does it in this same rendezvous, so
    /// the slot is clean everywhere before any rank offers it free again.
    pub(super) fn scrub_pads(&self, requests: &[Request], pad_size: usize) {
        let free: Vec<&[u64]> = requests.iter().map(|r| r.pad_free.as_slice()).collect();
        let scrub: Vec<&[u64]> = requests.iter().map(|r| r.pad_scrub.as_slice()).collect();
        let slots = pad_pool::slots_to_scrub(&free, &scrub);
        if slots.is_empty() {
            return;
        }
        tracing::debug!("scrubbing signal pad slots {slots:?}, let go on every rank");
        let provider = &self.shared.provider;
        self.shared
            .pads
            .scrub(pad_size, self.shared.rank, &slots, |addr, len| {
                // SAFETY: `addr..addr + len` is this rank's own pad in a pool window
                // the group keeps mapped; no rank has a window on it.
                let wrote = unsafe { provider.write(addr, &vec![0u8; len]) };
                if let Err(e) = wrote {
                    tracing::warn!("a signal pad could not be scrubbed: {e}");
                }
            });
    }
}

/// Bytes of poison mark per pad: host pads have one, CUDA pads none (torch's kernels
/// use every pad word; see `symmwin_host::poison_marks`).
fn mark_bytes(kind: symmwin_device::provider::ProviderKind) -> usize {
    match kind {
        symmwin_device::provider::ProviderKind::Host => symmwin_host::poison_marks::MARK_BYTES,
        symmwin_device::provider::ProviderKind::Cuda => 0,
    }
}
