//! The poison marks of host pads: one [`Poison`] record (two `u64` words) per rank per
//! pad slot, in the pad pool's host shared memory after every pad of the pool (see
//! `signal::pad_pool`), so no pad word changes meaning: the pads keep torch's 0/1
//! protocol. CUDA pads have no marks (torch's kernels use every pad word).
//!
//! The rank whose wait failed writes the record into every mapped rank's mark before
//! its call returns; every rank reads only its own, at the start of each call, after
//! each flip of a pad word and at each look of a wait (every 50 ms). The lowest mapped
//! rank's mark decides which failure came first (a CAS from zero), and that record is
//! copied into the others, so every rank names the same first failure.

use std::sync::atomic::{AtomicU64, Ordering};

use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::layout::PadLayout;
use symmwin_device::poison::{Poison, PoisonCause};

/// Bytes of one mark.
pub const MARK_BYTES: usize = 16;

/// The two words of the mark at `addr`.
///
/// # Safety
/// `addr` is the 8-byte aligned start of a mark in a mapped host pad pool that stays
/// mapped while the words are used; marks are accessed only atomically.
unsafe fn words<'a>(addr: usize) -> [&'a AtomicU64; 2] {
    // SAFETY: as the caller asserts, for both words of the mark.
    unsafe {
        [
            AtomicU64::from_ptr(addr as *mut u64),
            AtomicU64::from_ptr((addr + 8) as *mut u64),
        ]
    }
}

/// The record in the mark at `addr`, if any.
///
/// # Safety
/// As `words`.
pub unsafe fn read_at(addr: usize) -> Option<Poison> {
    // SAFETY: a propagation of the caller's assertion.
    let [word0, word1] = unsafe { words(addr) };
    let first = word0.load(Ordering::Acquire);
    if first == 0 {
        return None;
    }
    Poison::decode([first, word1.load(Ordering::Acquire)])
}

/// Zero the mark at `addr` (a slot no rank uses any more, being scrubbed).
///
/// # Safety
/// As `words`.
pub unsafe fn clear_at(addr: usize) {
    // SAFETY: a propagation of the caller's assertion.
    let [word0, word1] = unsafe { words(addr) };
    word1.store(0, Ordering::Relaxed);
    word0.store(0, Ordering::Release);
}

/// The record in this rank's own mark of `pads`, if they have marks and it is set.
pub fn read(pads: &PadLayout) -> Option<Poison> {
    let own = pads.mark(pads.rank())?;
    // SAFETY: `pads` describe a live window's pads (the caller holds the window), and
    // this rank's own pad pool memory is always mapped; `own` is 16-byte aligned.
    unsafe { read_at(own) }
}

/// The error of a call refused on a window poisoned by `poison`; where a peer's end
/// caused it, that peer is the error's peer, as it is for the rank that saw it.
pub fn refused(poison: Poison) -> Error {
    let departed = match poison.cause {
        PoisonCause::PeerExited | PoisonCause::PeerLost => poison.waited_for.first().copied(),
        PoisonCause::Timeout | PoisonCause::Interrupted => None,
    };
    let error = Error::new(Phase::Signal, ErrorKind::Poisoned(Box::new(poison)));
    match departed {
        Some(peer) => error.with_peer(peer),
        None => error,
    }
}

/// Fail when `pads` are poisoned: what every call does first.
pub fn check(pads: &PadLayout) -> Result<()> {
    match read(pads) {
        None => Ok(()),
        Some(poison) => Err(refused(poison).at_rank(pads.rank())),
    }
}

/// Claim the mark at `addr` for `words` if it is empty: `None` when claimed, else the
/// record already there.
///
/// # Safety
/// As [`words`].
unsafe fn claim_at(addr: usize, record: [u64; 2]) -> Option<[u64; 2]> {
    // SAFETY: a propagation of the caller's assertion.
    let [word0, word1] = unsafe { words(addr) };
    match word0.compare_exchange(0, record[0], Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            word1.store(record[1], Ordering::Release);
            None
        }
        Err(first) => Some([first, word1.load(Ordering::Acquire)]),
    }
}

/// Poison `pads` with `poison` on every rank `mapped` says this process maps: the first
/// failure of the window wins (the lowest mapped rank's mark decides), and is what
/// every mark then holds. Returns the record that won.
pub fn poison(pads: &PadLayout, mapped: impl Fn(usize) -> bool, poison: Poison) -> Poison {
    let owners: Vec<usize> = (0..pads.world()).filter(|&r| mapped(r)).collect();
    let mut record = poison.encode();
    for (i, &owner) in owners.iter().enumerate() {
        let Some(addr) = pads.mark(owner) else {
            return poison;
        };
        // SAFETY: `owner`'s pad pool memory is mapped here (`mapped`) for as long as
        // the window the caller holds; a mark is 16-byte aligned.
        let earlier = unsafe { claim_at(addr, record) };
        if let (0, Some(first)) = (i, earlier) {
            // Someone else failed first: spread their record, not ours.
            record = first;
        }
    }
    Poison::decode(record).unwrap_or(poison)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmwin_device::poison::PoisonCause;

    fn record(rank: usize) -> Poison {
        Poison {
            call: "barrier",
            channel: 1,
            rank,
            cause: PoisonCause::Timeout,
            waited_for: vec![(rank + 1) % 3],
        }
    }

    /// Three ranks' pads in one buffer: a mark each after the pads.
    #[test]
    fn the_first_failure_wins_and_every_mark_names_it() {
        let stride = 256;
        let mut memory = vec![0u64; 3 * stride / 8];
        let base = memory.as_mut_ptr() as usize;
        let pads = |rank| {
            PadLayout::from_parts(base, stride, 64, rank, 3)
                .unwrap()
                .with_marks(base + 128)
        };
        assert!(check(&pads(2)).is_ok());
        let won = poison(&pads(1), |_| true, record(1));
        assert_eq!(won, record(1));
        let second = poison(&pads(2), |_| true, record(2));
        assert_eq!(second, record(1), "the later failure spreads the first");
        for rank in 0..3 {
            let err = check(&pads(rank)).unwrap_err();
            assert!(
                matches!(err.kind(), ErrorKind::Poisoned(p) if **p == record(1)),
                "{err}"
            );
            assert_eq!(err.rank(), Some(rank));
        }
        // SAFETY: rank 0's mark lies in `memory`, alive and only accessed atomically.
        unsafe { clear_at(base + 128) };
        assert!(check(&pads(0)).is_ok());
        assert!(check(&pads(1)).is_err());
        drop(memory);
    }

    #[test]
    fn unmapped_ranks_are_not_touched_and_pads_without_marks_never_fail() {
        let stride = 256;
        let mut memory = vec![0u64; 2 * stride / 8];
        let base = memory.as_mut_ptr() as usize;
        let plain = PadLayout::from_parts(base, stride, 64, 0, 2).unwrap();
        assert_eq!(poison(&plain, |_| true, record(0)), record(0));
        assert!(check(&plain).is_ok());
        let marked = plain.with_marks(base + 128);
        poison(&marked, |r| r == 0, record(0));
        assert!(memory[(stride + 128) / 8] == 0, "rank 1's mark untouched");
        assert!(check(&marked).is_err());
    }
}
