//! A poisoned window: the record of the host signal wait that ended without completing
//! and so left the window's pads out of step between the ranks.
//!
//! A barrier posts into every peer's pad, then takes every peer's post from its own.
//! A wait that ends early (timeout, interrupt, a peer's exit) leaves posts behind in
//! either direction, in some pads only at world >= 3, and from then on the ranks'
//! calls would pair the N-th call of one rank with the N+1-th of another: every call
//! would return ok with another call's data. So the rank whose wait failed writes a
//! [`Poison`] into the window's host shared memory (see `symmwin_host::poison_marks`)
//! before its call returns, and every later call on the window, on every rank and
//! channel, fails with [`crate::ErrorKind::Poisoned`] naming the call and rank that
//! failed first.
//!
//! A record is two 64-bit words, so that a CAS can claim it (the first failure wins):
//! word 0 holds the call, channel, cause and failing rank, word 1 up to
//! [`MAX_WAITED`] ranks the failing rank was waiting for.

use std::fmt;

/// Most ranks a record names as waited for (one word of 21-bit fields).
pub const MAX_WAITED: usize = 3;

/// The calls a record can name, by index (6 bits): every signal call and host op.
const CALLS: &[&str] = &[
    "a call",
    "barrier",
    "put_signal",
    "wait_signal",
    "all_to_all",
    "all_to_all_vdev",
    "all_to_all_vdev_2d",
    "all_to_all_vdev_2d_offset",
    "broadcast",
    "put",
    "get",
    "put_with_signal",
    "tile_reduce",
    "multi_root_tile_reduce",
];

/// Why the wait that poisoned a window ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonCause {
    /// It timed out.
    Timeout,
    /// The caller interrupted it (Ctrl-C, [`crate::interrupt::request`]).
    Interrupted,
    /// A local peer's process ended.
    PeerExited,
    /// A peer on another host was lost (its process-group connection failed).
    PeerLost,
}

impl PoisonCause {
    const ALL: [PoisonCause; 4] = [
        PoisonCause::Timeout,
        PoisonCause::Interrupted,
        PoisonCause::PeerExited,
        PoisonCause::PeerLost,
    ];
}

impl fmt::Display for PoisonCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoisonCause::Timeout => "timed out",
            PoisonCause::Interrupted => "was interrupted",
            PoisonCause::PeerExited => "saw a peer's process end",
            PoisonCause::PeerLost => "lost a peer on another host",
        })
    }
}

/// Which call's wait ended early, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    /// The call ("barrier", "all_to_all", ...).
    pub call: &'static str,
    /// Its pad channel.
    pub channel: usize,
    /// The rank whose wait ended early.
    pub rank: usize,
    /// Why it ended.
    pub cause: PoisonCause,
    /// Ranks it was waiting for (at most three: what the shared mark has room for).
    pub waited_for: Vec<usize>,
}

/// Set in word 0 of every record, so that a record is never zero (zero: no poison).
const PRESENT: u64 = 1 << 63;
const RANK_BITS: u32 = 32;
const CHANNEL_BITS: u32 = 23;
const CAUSE_SHIFT: u32 = RANK_BITS + CHANNEL_BITS;
const CALL_SHIFT: u32 = CAUSE_SHIFT + 2;
const WAITED_BITS: u32 = 21;

fn field(word: u64, shift: u32, bits: u32) -> u64 {
    (word >> shift) & ((1 << bits) - 1)
}

impl Poison {
    /// The record as two words (word 0 never zero). Fields too wide for their bits are
    /// clipped: a rank above 2^32 reads as its low bits, a waited-for rank that does
    /// not fit 21 bits is left out.
    pub fn encode(&self) -> [u64; 2] {
        let call = CALLS.iter().position(|&c| c == self.call).unwrap_or(0) as u64;
        let cause = PoisonCause::ALL
            .iter()
            .position(|&c| c == self.cause)
            .unwrap_or(0) as u64;
        let channel = (self.channel as u64).min((1 << CHANNEL_BITS) - 1);
        let word0 = PRESENT
            | (call << CALL_SHIFT)
            | (cause << CAUSE_SHIFT)
            | (channel << RANK_BITS)
            | (self.rank as u64 & u64::from(u32::MAX));
        let word1 = self
            .waited_for
            .iter()
            .filter_map(|&r| u64::try_from(r + 1).ok().filter(|&v| v < 1 << WAITED_BITS))
            .take(MAX_WAITED)
            .enumerate()
            .fold(0, |acc, (i, v)| acc | (v << (i as u32 * WAITED_BITS)));
        [word0, word1]
    }

    /// The record two words hold, if word 0 holds one.
    pub fn decode(words: [u64; 2]) -> Option<Poison> {
        let [word0, word1] = words;
        if word0 & PRESENT == 0 {
            return None;
        }
        let call = CALLS
            .get(field(word0, CALL_SHIFT, 6) as usize)
            .copied()
            .unwrap_or(CALLS[0]);
        let waited_for = (0..MAX_WAITED as u32)
            .map(|i| field(word1, i * WAITED_BITS, WAITED_BITS))
            .filter(|&v| v != 0)
            .map(|v| v as usize - 1)
            .collect();
        Some(Poison {
            call,
            channel: field(word0, RANK_BITS, CHANNEL_BITS) as usize,
            rank: field(word0, 0, RANK_BITS) as usize,
            cause: PoisonCause::ALL[field(word0, CAUSE_SHIFT, 2) as usize],
            waited_for,
        })
    }
}

impl fmt::Display for Poison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on channel {} {} on rank {}",
            self.call, self.channel, self.cause, self.rank
        )?;
        if !self.waited_for.is_empty() {
            write!(
                f,
                " while it waited for rank(s) {}",
                crate::text::ranks(&self.waited_for)
            )?;
        }
        Ok(())
    }
}

/// What to do about a poisoned window, for every message that names one.
pub const REMEDY: &str = "free the tensor (every view of it) and allocate a new one on \
                          every rank; other windows of the group and new ones are unaffected";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips_through_its_words() {
        for (i, &call) in CALLS.iter().enumerate() {
            for cause in PoisonCause::ALL {
                let poison = Poison {
                    call,
                    channel: i * 7,
                    rank: 1000 + i,
                    cause,
                    waited_for: (0..i % 4).map(|r| r * 3).collect(),
                };
                let words = poison.encode();
                assert_ne!(words[0], 0);
                assert_eq!(Poison::decode(words), Some(poison));
            }
        }
        assert_eq!(Poison::decode([0, 0]), None);
    }

    #[test]
    fn fields_too_wide_are_clipped_not_confused() {
        let poison = Poison {
            call: "not a call",
            channel: usize::MAX,
            rank: 5,
            cause: PoisonCause::Timeout,
            waited_for: vec![1 << 22, 2, 3, 4, 5],
        };
        let back = Poison::decode(poison.encode()).unwrap();
        assert_eq!(back.call, "a call");
        assert_eq!(back.channel, (1 << CHANNEL_BITS) - 1);
        assert_eq!(back.rank, 5);
        assert_eq!(back.waited_for, vec![2, 3, 4]);
    }
}
