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
//!
//! Host pools also hold a poison mark per pad (see `symmwin_host::poison_marks`),
//! after the last pad of the pool. A host slot whose mark is set, or whose pad still
//! holds a signal, is offered as *to scrub* instead of free; once every rank offers a
//! slot free or to scrub, no rank has a window on it any more (and a host signal is
//! never in flight without one), so every rank zeroes its own pad and mark of it in
//! that rendezvous, and offers it free from the next on. A poisoned window therefore
//! holds one slot while any rank keeps it, and none after. CUDA pads are never
//! scrubbed: a kernel queued before the free may still wait on them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use symmwin_device::lock::Recover;

use symmwin_device::error::Result;
use symmwin_device::layout::{pad_place, FlatLayout, PadLayout};
use symmwin_device::provider::Span;
use symmwin_host::poison_marks;

/// One pool window: `slots` pads of `pad_size` bytes in every rank's slot.
#[derive(Debug)]
pub(crate) struct PoolWindow {
    /// Keeps every rank's pads mapped while any lease or the pool lives.
    pub(crate) _span: Box<dyn Span>,
    pub(crate) layout: FlatLayout,
}

#[derive(Debug, Default)]
struct PadSet {
    /// Bytes of poison mark per pad (host pools), after the pool's last pad.
    mark_bytes: usize,
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

/// Slots per pool for a pad size and a mark size, given the pool's bytes per rank.
pub(crate) fn slots_per_pool(pool_bytes: usize, pad_size: usize, mark_bytes: usize) -> usize {
    (pool_bytes / (pad_size + mark_bytes).max(1)).max(1)
}

/// Fewest pads a pool holds, so that small-page providers (host memory) do not grow a
/// pool for every few live windows.
const MIN_SLOTS: usize = 64;

/// Bytes per rank of one pool window: at least one granule and [`MIN_SLOTS`] pads,
/// each with its mark.
pub(crate) fn pool_bytes(pad_size: usize, granularity: usize, mark_bytes: usize) -> Result<usize> {
    let want = pad_size
        .checked_add(mark_bytes)
        .and_then(|each| each.checked_mul(MIN_SLOTS))
        .ok_or_else(|| {
            symmwin_device::error::Error::invalid(format!(
                "signal pad size {pad_size} is too large"
            ))
        })?;
    symmwin_device::layout::round_up(want.max(granularity), granularity)
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
    /// Pools, free bitmap and to-scrub bitmap for `pad_size`, as published in a
    /// request. A dirty slot counts as free once `is_zero(address, len)` finds this
    /// rank's pad all zero; on host pools (with marks), a slot whose mark is set or
    /// whose pad is not zero is to scrub.
    pub(crate) fn snapshot(
        &self,
        pad_size: usize,
        rank: usize,
        is_zero: impl Fn(usize, usize) -> bool,
    ) -> PadSnapshot {
        let mut sets = self.sets.lock().recover();
        let Some(set) = sets.get_mut(&pad_size) else {
            return PadSnapshot::default();
        };
        let mut free = vec![0u64; set.used.len().div_ceil(64)];
        let mut scrub = free.clone();
        for slot in 0..set.used.len() {
            if set.used[slot] {
                continue;
            }
            let Some((pad, mark)) = set.own(slot, pad_size, rank) else {
                continue;
            };
            let bit = (slot / 64, 1u64 << (slot % 64));
            // SAFETY: the mark lies in this rank's own slot of a pool window the set
            // keeps mapped; marks are accessed only atomically.
            let poisoned = mark.is_some_and(|m| unsafe { poison_marks::read_at(m) }.is_some());
            let stale = set.dirty[slot] && !is_zero(pad, pad_size);
            match (poisoned || stale, mark.is_some()) {
                (false, _) => {
                    set.dirty[slot] = false;
                    free[bit.0] |= bit.1;
                }
                (true, true) => scrub[bit.0] |= bit.1,
                (true, false) => {
                    tracing::debug!("signal pad slot {slot} still holds a signal; not reused yet")
                }
            }
        }
        PadSnapshot {
            pools: set.pools.len(),
            free,
            scrub,
        }
    }

    /// Zero this rank's pad and mark of every slot in `slots` (each free or to scrub
    /// on every rank: no rank has a window on it), so that it is offered free again.
    pub(crate) fn scrub(
        &self,
        pad_size: usize,
        rank: usize,
        slots: &[usize],
        zero: impl Fn(usize, usize),
    ) {
        let mut sets = self.sets.lock().recover();
        let Some(set) = sets.get_mut(&pad_size) else {
            return;
        };
        for &slot in slots {
            if set.used.get(slot) != Some(&false) {
                continue;
            }
            let Some((pad, Some(mark))) = set.own(slot, pad_size, rank) else {
                continue;
            };
            zero(pad, pad_size);
            // SAFETY: as in `snapshot`.
            unsafe { poison_marks::clear_at(mark) };
            set.dirty[slot] = false;
        }
    }

    /// Add a pool window with `mark_bytes` of poison mark per pad (all ranks do this
    /// at the same point of the same rendezvous).
    pub(crate) fn grow(&self, pad_size: usize, pool: PoolWindow, mark_bytes: usize) {
        let slots = slots_per_pool(pool.layout.stride, pad_size, mark_bytes);
        let mut sets = self.sets.lock().recover();
        let set = sets.entry(pad_size).or_default();
        set.mark_bytes = mark_bytes;
        set.pools.push(Arc::new(pool));
        set.used.extend(std::iter::repeat_n(false, slots));
        set.dirty.extend(std::iter::repeat_n(false, slots));
    }

    /// Mark `slot` used and return where its pads are.
    pub(crate) fn take(self: &Arc<Self>, pad_size: usize, slot: usize) -> Option<PadLease> {
        let mut sets = self.sets.lock().recover();
        let set = sets.get_mut(&pad_size)?;
        let per_pool = set.per_pool(pad_size)?;
        let (pool, offset) = pad_place(slot, per_pool, pad_size);
        let mark = set.mark_offset(slot, per_pool, pad_size);
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
            mark,
        })
    }

    /// The pool window whose pads of `rank` hold the `len` bytes at `addr`, if any: a
    /// wait on a word given by address proves with it that the word is a signal pad,
    /// and keeps the pad mapped while it waits.
    pub(crate) fn holding(&self, rank: usize, addr: usize, len: usize) -> Option<Arc<PoolWindow>> {
        let end = addr.checked_add(len)?;
        let sets = self.sets.lock().recover();
        let mut pools = sets.values().flat_map(|set| &set.pools);
        pools
            .find(|pool| {
                let own = pool.layout.slot_range(rank, 0, pool.layout.stride);
                own.is_ok_and(|own| own.start <= addr && end <= own.end)
            })
            .cloned()
    }

    /// Number of pool windows across all pad sizes (for tests and diagnostics).
    /// (Bounded under poison: see the module docs.)
    pub(crate) fn pool_count(&self) -> usize {
        let sets = self.sets.lock().recover();
        sets.values().map(|s| s.pools.len()).sum()
    }
}

impl PadSet {
    /// Pads per pool window of this set.
    fn per_pool(&self, pad_size: usize) -> Option<usize> {
        let stride = self.pools.first()?.layout.stride;
        Some(slots_per_pool(stride, pad_size, self.mark_bytes))
    }

    /// Offset in every rank's slot of a pool of `slot`'s poison mark, if pads have marks.
    fn mark_offset(&self, slot: usize, per_pool: usize, pad_size: usize) -> Option<usize> {
        (self.mark_bytes > 0).then(|| per_pool * pad_size + (slot % per_pool) * self.mark_bytes)
    }

    /// This rank's pad of `slot` and its mark (if pads have marks), by address.
    fn own(&self, slot: usize, pad_size: usize, rank: usize) -> Option<(usize, Option<usize>)> {
        let per_pool = self.per_pool(pad_size)?;
        let (pool, offset) = pad_place(slot, per_pool, pad_size);
        let layout = self.pools.get(pool)?.layout;
        let start = layout.slot_range(rank, 0, layout.stride).ok()?.start;
        let mark = self.mark_offset(slot, per_pool, pad_size);
        Some((start + offset, mark.map(|m| start + m)))
    }
}

/// What a request says of this rank's pools of one pad size.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PadSnapshot {
    /// Pool windows.
    pub(crate) pools: usize,
    /// Free slots, 64 a word.
    pub(crate) free: Vec<u64>,
    /// Slots to scrub before reuse (host pools), 64 a word.
    pub(crate) scrub: Vec<u64>,
}

/// The slots every rank offers free or to scrub, and at least one to scrub: no rank
/// has a window on them, so each rank may scrub its own pads of them.
pub(crate) fn slots_to_scrub(free: &[&[u64]], scrub: &[&[u64]]) -> Vec<usize> {
    let words = free.iter().chain(scrub).map(|b| b.len()).min().unwrap_or(0);
    let word = |b: &[u64], w: usize| b.get(w).copied().unwrap_or(0);
    (0..words)
        .flat_map(|w| {
            let everywhere = free
                .iter()
                .zip(scrub)
                .fold(u64::MAX, |acc, (f, s)| acc & (word(f, w) | word(s, w)));
            let anywhere = scrub.iter().fold(0, |acc, s| acc | word(s, w));
            let bits = everywhere & anywhere;
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
        .collect()
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
    /// Offset of its poison mark in every rank's slot of the pool (host pools).
    mark: Option<usize>,
}

impl PadLease {
    /// Where every rank's pad of this lease is, seen from `rank`.
    pub(crate) fn layout(&self, rank: usize) -> Result<PadLayout> {
        let pads = PadLayout::new(
            self.pool.layout.at_offset(self.offset)?,
            self.pad_size,
            rank,
        )?;
        Ok(match self.mark {
            Some(mark) => pads.with_marks(self.pool.layout.at_offset(mark)?.base),
            None => pads,
        })
    }

    pub(crate) fn pad_size(&self) -> usize {
        self.pad_size
    }
}

impl Drop for PadLease {
    fn drop(&mut self) {
        let mut sets = self.pools.sets.lock().recover();
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

    /// Pools of `pad`-byte pads over one window `span` laid out as `layout`, with
    /// `mark_bytes` of poison marks per pad.
    fn pools_over(
        pad: usize,
        span: Box<dyn Span>,
        layout: FlatLayout,
        mark_bytes: usize,
    ) -> Arc<PadPools> {
        let pools = Arc::new(PadPools::default());
        let window = PoolWindow {
            _span: span,
            layout,
        };
        pools.grow(pad, window, mark_bytes);
        pools
    }

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
        use symmwin_device::provider::Provider;
        let provider = symmwin_host::HostProvider::new();
        let (pad, world, rank) = (4096, 2, 1);
        let stride = pad * MIN_SLOTS;
        // Never mapped: the pool must not write to it (a write would fault).
        let span = provider.reserve(stride * world).unwrap();
        let layout = FlatLayout::new(span.base(), stride, world).unwrap();
        let pools = pools_over(pad, span, layout, 0);

        let lease = pools.take(pad, 3).unwrap();
        assert_eq!(
            pools.take(pad, 3).map(|_| ()),
            None,
            "a used slot is not taken twice"
        );
        let own_pad = layout.slot(rank).unwrap() + 3 * pad;
        drop(lease);

        let asked = std::cell::RefCell::new(Vec::new());
        let busy = pools.snapshot(pad, rank, |addr, len| {
            asked.borrow_mut().push((addr, len));
            false
        });
        assert_eq!(*asked.borrow(), vec![(own_pad, pad)]);
        let busy = busy.free;
        assert_eq!(busy[0] & (1 << 3), 0, "a pad holding a signal is not free");
        assert_eq!(busy[0] & 0b111, 0b111, "clean slots stay free");

        let free = pools.snapshot(pad, rank, |_, _| true).free;
        assert_ne!(
            free[0] & (1 << 3),
            0,
            "a pad read back as zero is free again"
        );
        let again = pools.snapshot(pad, rank, |_, _| unreachable!("clean slots are not read"));
        let again = again.free;
        assert_eq!(again, free);
    }

    #[test]
    fn a_slot_is_scrubbed_only_once_every_rank_has_let_it_go() {
        let free = [0b0011u64];
        let scrub_here = [0b0100u64];
        let free_there = [0b0111u64];
        let none = [0u64];
        assert_eq!(
            slots_to_scrub(&[&free, &free_there], &[&scrub_here, &none]),
            vec![2]
        );
        // Slot 2 is still in use on the other rank (neither free nor to scrub).
        let busy_there = [0b0011u64];
        assert!(slots_to_scrub(&[&free, &busy_there], &[&scrub_here, &none]).is_empty());
        // Free everywhere and to scrub nowhere: nothing to do.
        assert!(slots_to_scrub(&[&free, &free_there], &[&none, &none]).is_empty());
    }

    /// A host pool's poisoned slot is offered to scrub, not free, and free again once
    /// scrubbed (pad and mark zero).
    #[test]
    fn a_poisoned_host_slot_is_scrubbed_then_free() {
        use symmwin_device::provider::Provider;
        let provider = symmwin_host::HostProvider::new();
        let (pad, world, rank) = (64, 2, 0);
        let bytes = pool_bytes(pad, symmwin_host::page_size(), 16).unwrap();
        let memory = provider.create(bytes * world).unwrap();
        let mut span = provider.reserve(bytes * world).unwrap();
        span.map(0, memory.as_ref()).unwrap();
        let layout = FlatLayout::new(span.base(), bytes, world).unwrap();
        let pools = pools_over(pad, span, layout, 16);
        let lease = pools.take(pad, 5).unwrap();
        let pads = lease.layout(rank).unwrap();
        let poison = symmwin_device::poison::Poison {
            call: "barrier",
            channel: 0,
            rank: 1,
            cause: symmwin_device::poison::PoisonCause::Interrupted,
            waited_for: vec![0],
        };
        poison_marks::poison(&pads, |_| true, poison);
        let word = pads.word(rank, 0, 1).unwrap();
        // SAFETY: a word of this rank's mapped pad.
        unsafe { (word as *mut u32).write(1) };
        assert!(poison_marks::check(&pads).is_err());
        drop(lease);
        let zero = |addr: usize, len: usize| {
            // SAFETY: the range is a pad of the mapped pool.
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
                .iter()
                .all(|&b| b == 0)
        };
        let snap = pools.snapshot(pad, rank, zero);
        assert_eq!((snap.free[0] >> 5) & 1, 0, "not free");
        assert_eq!(snap.scrub[0], 1 << 5, "to scrub");
        pools.scrub(pad, rank, &[5], |addr, len| {
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) }
        });
        let snap = pools.snapshot(pad, rank, zero);
        assert_eq!((snap.free[0] >> 5) & 1, 1, "free again");
        assert_eq!(snap.scrub[0], 0);
        let again = pools.take(pad, 5).unwrap().layout(rank).unwrap();
        assert!(poison_marks::check(&again).is_ok());
        assert_eq!(pools.pool_count(), 1);
    }

    #[test]
    fn pool_geometry() {
        let g = 2 << 20;
        assert_eq!(pool_bytes(9216, g, 0).unwrap(), g);
        assert_eq!(slots_per_pool(g, 9216, 0), 227);
        assert_eq!(pool_bytes(9216, 4096, 0).unwrap(), 9216 * 64);
        assert_eq!(slots_per_pool(9216 * 64, 9216, 0), 64);
        assert_eq!(pool_bytes(3 << 20, g, 0).unwrap(), 192 << 20);
        // Host pools: a mark per pad after the pads, so one page more.
        let marked = pool_bytes(9216, 4096, 16).unwrap();
        assert_eq!(marked, 9216 * 64 + 4096);
        assert_eq!(slots_per_pool(marked, 9216, 16), 64);
    }
}
