//! The signal-pad pool: pads are slots of a few shared pool windows per group,
//! never an extra page per window.
//!
//! A window's rendezvous carries every rank's free-slot bitmap; the slot used is the
//! lowest one free on *all* ranks, so windows freed in different orders on different
//! ranks (garbage collection) can never make two live windows share a pad. When no
//! slot is free everywhere, every rank sees that same fact and grows the pool
//! together.
//!
//! Pads are zero at rest, because every put is consumed by a wait. They are *not*
//! zeroed when a window is freed: the free happens on the host while kernels queued on
//! the user's streams may still be waiting on the pad, and a peer may already have
//! written the signal such a kernel is about to consume, so zeroing would erase it
//! and hang that kernel. Instead a freed slot is *dirty* until this rank sees its own
//! pad all zero again (checked when the next request is built); until then it is not
//! offered as free, so a stray signal (a put no one waited for) quarantines its slot
//! rather than leaking into the next window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::layout::{pad_place, FlatLayout, PadLayout};
use crate::provider::Span;

/// One pool window: `slots` pads of `pad_size` bytes in every rank's slot.
#[derive(Debug)]
pub(crate) struct PoolWindow {
    /// Keeps every rank's pads mapped while any lease or the pool lives.
    pub(crate) _span: Box<dyn Span>,
    pub(crate) layout: FlatLayout,
}

#[derive(Debug, Default)]
struct PadSet {
    pools: Vec<Arc<PoolWindow>>,
    used: Vec<bool>,
    /// Freed, but this rank's pad was not yet seen all zero.
    dirty: Vec<bool>,
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
    /// Pools and free bitmap for `pad_size`, as published in a request. A dirty slot
    /// counts as free once `is_zero(address, len)` finds this rank's pad all zero.
    pub(crate) fn snapshot(
        &self,
        pad_size: usize,
        rank: usize,
        is_zero: impl Fn(usize, usize) -> bool,
    ) -> (usize, Vec<u64>) {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(set) = sets.get_mut(&pad_size) else {
            return (0, Vec::new());
        };
        let per_pool = set
            .pools
            .first()
            .map_or(1, |p| slots_per_pool(p.layout.stride, pad_size));
        let mut bits = vec![0u64; set.used.len().div_ceil(64)];
        for slot in 0..set.used.len() {
            if set.used[slot] {
                continue;
            }
            if set.dirty[slot] {
                let (pool, offset) = pad_place(slot, per_pool, pad_size);
                let Some(own) = set.pools.get(pool).and_then(|pool| {
                    let range = pool.layout.slot_range(rank, offset, pad_size).ok()?;
                    Some(range.start)
                }) else {
                    continue;
                };
                if !is_zero(own, pad_size) {
                    tracing::debug!("signal pad slot {slot} still holds a signal; not reused yet");
                    continue;
                }
                set.dirty[slot] = false;
            }
            bits[slot / 64] |= 1 << (slot % 64);
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
        set.dirty.extend(std::iter::repeat_n(false, slots));
    }

    /// Mark `slot` used and return where its pads are.
    pub(crate) fn take(self: &Arc<Self>, pad_size: usize, slot: usize) -> Option<PadLease> {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let set = sets.get_mut(&pad_size)?;
        let per_pool = slots_per_pool(set.pools.first()?.layout.stride, pad_size);
        let (pool, offset) = pad_place(slot, per_pool, pad_size);
        let pool = set.pools.get(pool)?.clone();
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
            offset,
        })
    }

    /// The pool window whose pads of `rank` hold the `len` bytes at `addr`, if any: a
    /// wait on a word given by address proves with it that the word is a signal pad,
    /// and keeps the pad mapped while it waits.
    pub(crate) fn holding(&self, rank: usize, addr: usize, len: usize) -> Option<Arc<PoolWindow>> {
        let end = addr.checked_add(len)?;
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let mut pools = sets.values().flat_map(|set| &set.pools);
        pools
            .find(|pool| {
                let own = pool.layout.slot_range(rank, 0, pool.layout.stride);
                own.is_ok_and(|own| own.start <= addr && end <= own.end)
            })
            .cloned()
    }

    /// Number of pool windows across all pad sizes (for tests and diagnostics).
    pub(crate) fn pool_count(&self) -> usize {
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        sets.values().map(|s| s.pools.len()).sum()
    }
}

/// A window's claim on one pad slot. Frees the slot, dirty, on drop (see the module
/// docs for why it is not zeroed).
#[derive(Debug)]
pub(crate) struct PadLease {
    pools: Arc<PadPools>,
    pool: Arc<PoolWindow>,
    pad_size: usize,
    slot: usize,
    offset: usize,
}

impl PadLease {
    /// Where every rank's pad of this lease is, seen from `rank`.
    pub(crate) fn layout(&self, rank: usize) -> Result<PadLayout> {
        PadLayout::new(
            self.pool.layout.at_offset(self.offset)?,
            self.pad_size,
            rank,
        )
    }

    pub(crate) fn pad_size(&self) -> usize {
        self.pad_size
    }
}

impl Drop for PadLease {
    fn drop(&mut self) {
        let mut sets = self.pools.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = sets.get_mut(&self.pad_size) {
            if let (Some(used), Some(dirty)) =
                (set.used.get_mut(self.slot), set.dirty.get_mut(self.slot))
            {
                *used = false;
                *dirty = true;
            }
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

    /// A freed slot whose pad still holds a signal (a kernel queued before the free
    /// has not consumed it yet) is not offered again until the pad reads all zero, and
    /// the free itself never touches the pad.
    #[test]
    fn freed_slot_is_offered_only_once_its_pad_reads_zero() {
        use crate::provider::Provider;
        let provider = crate::HostProvider::new();
        let (pad, world, rank) = (4096, 2, 1);
        let stride = pad * MIN_SLOTS;
        // Never mapped: the pool must not write to it (a write would fault).
        let span = provider.reserve(stride * world).unwrap();
        let layout = FlatLayout::new(span.base(), stride, world).unwrap();
        let pools = Arc::new(PadPools::default());
        pools.grow(
            pad,
            PoolWindow {
                _span: span,
                layout,
            },
        );

        let lease = pools.take(pad, 3).unwrap();
        assert_eq!(
            pools.take(pad, 3).map(|_| ()),
            None,
            "a used slot is not taken twice"
        );
        let own_pad = layout.slot(rank).unwrap() + 3 * pad;
        drop(lease);

        let asked = std::cell::RefCell::new(Vec::new());
        let (_, busy) = pools.snapshot(pad, rank, |addr, len| {
            asked.borrow_mut().push((addr, len));
            false
        });
        assert_eq!(*asked.borrow(), vec![(own_pad, pad)]);
        assert_eq!(busy[0] & (1 << 3), 0, "a pad holding a signal is not free");
        assert_eq!(busy[0] & 0b111, 0b111, "clean slots stay free");

        let (_, free) = pools.snapshot(pad, rank, |_, _| true);
        assert_ne!(
            free[0] & (1 << 3),
            0,
            "a pad read back as zero is free again"
        );
        let (_, again) = pools.snapshot(pad, rank, |_, _| unreachable!("clean slots are not read"));
        assert_eq!(again, free);
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
