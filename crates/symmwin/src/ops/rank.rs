//! A rank argument as its caller gave it, checked against the group in one place.
//!
//! Adapters hand ranks over at their own width (torch's `int` is 64 bits, C's `int`
//! 32). Narrowing one before the check turns `2**32 + 1` into rank 1, so the value
//! travels whole, negative values included, and only [`Rank::in_group`] turns it into
//! an index.

use symmwin_device::error::{Error, Result};

/// A rank (a peer or a root) not yet checked against a group's world size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank(i128);

macro_rules! rank_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Rank {
            fn from(value: $t) -> Rank {
                Rank(i128::from(value))
            }
        }
    )*};
}
rank_from!(i32, u32, i64, u64);

impl From<usize> for Rank {
    fn from(value: usize) -> Rank {
        // usize is at most 64 bits on every target Rust supports for this crate.
        Rank(i128::try_from(value).unwrap_or(i128::MAX))
    }
}

impl Rank {
    /// The rank as an index of a group of `world` ranks; `what` names the argument
    /// ("peer", "root") in the error for a value outside `0..world`.
    pub fn in_group(self, world: usize, what: &str) -> Result<usize> {
        usize::try_from(self.0)
            .ok()
            .filter(|&r| r < world)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{what} {} is not a rank of the group (0 to {}, world size {world})",
                    self.0,
                    world.saturating_sub(1)
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ranks_of_the_group_pass_whatever_their_width() {
        assert_eq!(Rank::from(3usize).in_group(4, "peer").unwrap(), 3);
        assert_eq!(Rank::from(0i32).in_group(1, "root").unwrap(), 0);
        for bad in [
            Rank::from(4usize),
            Rank::from(-1i64),
            Rank::from((1i64 << 32) + 1),
        ] {
            assert!(bad.in_group(4, "peer").is_err(), "{bad:?}");
        }
        assert!(Rank::from(u64::MAX).in_group(usize::MAX, "peer").is_err());
        let message = Rank::from(1i64 << 32)
            .in_group(2, "root")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("root 4294967296 is not a rank of the group (0 to 1, world size 2)"),
            "{message}"
        );
    }
}
