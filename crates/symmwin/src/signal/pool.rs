//! The signal-pad pool: pads are slots of a few shared pool windows per group,
//! never an extra page per window.
//!
//! A window's rendezvous carries every rank's free-slot bitmap; the slot used is the
//! lowest one free on *all* ranks, so windows freed in different orders on different
//! ranks (garbage collection) can never make two live windows share a pad. When no
//! slot is free everywhere, every rank sees that same fact and grows the pool
//! together. Pads are zero at rest: a pad is zeroed when its window is freed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::layout::FlatLayout;
use crate::provider::Span;

/// One pool window: `slots` pads of `pad_size` bytes in every rank's slot.
#[derive(Debug)]
pub(crate) struct PoolWindow {
    pub(crate) span: Box<dyn Span>,
    pub(crate) layout: FlatLayout,
}

#[derive(Debug, Default)]
struct PadSet {
    pools: Vec<Arc<PoolWindow>>,
    used: Vec<bool>,
}

/// Every pad pool of one group, by pad size.
#[derive(Debug, Default)]
pub(crate) struct PadPools {
    sets: Mutex<HashMap<usize, PadSet>>,
}

/// Slots per pool for a pad size, given the pool's bytes per rank.
pub(crate) fn slots_per_pool(pool_bytes: usize, pad_size: usize) -> usize {
    (pool_bytes / pad_size.max(1)).max(1)
}

/// Fewest pads a pool holds, so that small-page providers (host memory) do not grow a
/// pool for every few live windows.
const MIN_SLOTS: usize = 64;

/// Bytes per rank of one pool window: at least one granule and [`MIN_SLOTS`] pads.
pub(crate) fn pool_bytes(pad_size: usize, granularity: usize) -> Result<usize> {
    let want = pad_size
        .checked_mul(MIN_SLOTS)
        .ok_or_else(|| crate::Error::invalid(format!("signal pad size {pad_size} is too large")))?;
    crate::layout::round_up(want.max(granularity), granularity)
}

/// Lowest slot free on every rank.
pub(crate) fn common_free_slot(bitmaps: &[&[u64]]) -> Option<usize> {
    let words = bitmaps.iter().map(|b| b.len()).min()?;
    (0..words).find_map(|w| {
        let all = bitmaps.iter().fold(u64::MAX, |acc, b| acc & b[w]);
        (all != 0).then(|| w * 64 + all.trailing_zeros() as usize)
    })
}

impl PadPools {
    /// Pools and free bitmap for `pad_size`, as published in a request.
    pub(crate) fn snapshot(&self, pad_size: usize) -> (usize, Vec<u64>) {
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(set) = sets.get(&pad_size) else {
            return (0, Vec::new());
        };
        let mut bits = vec![0u64; set.used.len().div_ceil(64)];
        for (i, used) in set.used.iter().enumerate() {
            if !used {
                bits[i / 64] |= 1 << (i % 64);
            }
        }
        (set.pools.len(), bits)
    }

    /// Add a pool window (all ranks do this at the same point of the same rendezvous).
    pub(crate) fn grow(&self, pad_size: usize, pool: PoolWindow) {
        let slots = slots_per_pool(pool.layout.stride, pad_size);
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let set = sets.entry(pad_size).or_default();
        set.pools.push(Arc::new(pool));
        set.used.extend(std::iter::repeat_n(false, slots));
    }

    /// Mark `slot` used and return where its pads are.
    pub(crate) fn take(
        self: &Arc<Self>,
        pad_size: usize,
        slot: usize,
        rank: usize,
    ) -> Option<PadLease> {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let set = sets.get_mut(&pad_size)?;
        let per_pool = slots_per_pool(set.pools.first()?.layout.stride, pad_size);
        let pool = set.pools.get(slot / per_pool)?.clone();
        let used = set.used.get_mut(slot)?;
        if *used {
            return None;
        }
        *used = true;
        Some(PadLease {
            pools: Arc::clone(self),
            pool,
            pad_size,
            slot,
            offset: (slot % per_pool) * pad_size,
            rank,
        })
    }

    /// Number of pool windows across all pad sizes (for tests and diagnostics).
    pub(crate) fn pool_count(&self) -> usize {
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        sets.values().map(|s| s.pools.len()).sum()
    }
}

/// A window's claim on one pad slot. Zeroes this rank's pad and frees the slot on drop.
#[derive(Debug)]
pub(crate) struct PadLease {
    pools: Arc<PadPools>,
    pool: Arc<PoolWindow>,
    pad_size: usize,
    slot: usize,
    offset: usize,
    rank: usize,
}

impl PadLease {
    /// Address of rank 0's pad; rank r's is `base() + r * stride()`.
    pub(crate) fn base(&self) -> usize {
        self.pool.layout.base + self.offset
    }

    pub(crate) fn stride(&self) -> usize {
        self.pool.layout.stride
    }

    pub(crate) fn pad_size(&self) -> usize {
        self.pad_size
    }
}

impl Drop for PadLease {
    fn drop(&mut self) {
        let own = self.rank * self.pool.layout.stride + self.offset;
        if let Err(e) = self.pool.span.zero(own, self.pad_size) {
            tracing::error!("zeroing a signal pad on free failed: {e}");
        }
        let mut sets = self.pools.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(used) = sets
            .get_mut(&self.pad_size)
            .and_then(|s| s.used.get_mut(self.slot))
        {
            *used = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_slot_is_lowest_free_everywhere() {
        let a = [0b1011u64];
        let b = [0b1110u64];
        assert_eq!(common_free_slot(&[&a, &b]), Some(1));
        let c = [0b0001u64];
        assert_eq!(common_free_slot(&[&a, &b, &c]), None);
        let d = [0, 1 << 5];
        let e = [u64::MAX, u64::MAX];
        assert_eq!(common_free_slot(&[&d, &e]), Some(69));
        assert_eq!(common_free_slot(&[]), None);
    }

    #[test]
    fn pool_geometry() {
        let g = 2 << 20;
        assert_eq!(pool_bytes(9216, g).unwrap(), g);
        assert_eq!(slots_per_pool(g, 9216), 227);
        assert_eq!(pool_bytes(9216, 4096).unwrap(), 9216 * 64);
        assert_eq!(slots_per_pool(9216 * 64, 9216), 64);
        assert_eq!(pool_bytes(3 << 20, g).unwrap(), 192 << 20);
    }
}
