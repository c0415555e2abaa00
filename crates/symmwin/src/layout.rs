//! The flat-window layout: rank `r`'s slot starts at `base + r * stride`.
//!
//! All address arithmetic of the crate lives here so it can be tested exhaustively.

use crate::error::{Error, Result};

/// Round `size` up to a multiple of `granularity` (a power of two). Zero stays zero.
pub fn round_up(size: usize, granularity: usize) -> Result<usize> {
    if granularity == 0 || !granularity.is_power_of_two() {
        return Err(Error::invalid(format!(
            "granularity {granularity} is not a power of two"
        )));
    }
    size.checked_add(granularity - 1)
        .map(|s| s & !(granularity - 1))
        .ok_or_else(|| Error::invalid(format!("size {size} overflows when rounded up")))
}

/// Where every rank's slot lives in one process's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatLayout {
    /// Address of rank 0's slot.
    pub base: usize,
    /// Distance between consecutive ranks' slots; a multiple of the granularity.
    pub stride: usize,
    /// Number of ranks.
    pub world: usize,
}

impl FlatLayout {
    /// A layout of `world` slots of `stride` bytes at `base`; the span must fit the address space.
    pub fn new(base: usize, stride: usize, world: usize) -> Result<Self> {
        if world == 0 {
            return Err(Error::invalid("world size must be at least 1"));
        }
        Self::span_len(stride, world)?
            .checked_add(base)
            .ok_or_else(|| Error::invalid("span does not fit the address space"))?;
        Ok(FlatLayout {
            base,
            stride,
            world,
        })
    }

    /// Bytes a span of `world` slots of `stride` bytes needs.
    pub fn span_len(stride: usize, world: usize) -> Result<usize> {
        stride
            .checked_mul(world)
            .ok_or_else(|| Error::invalid(format!("{world} slots of {stride} bytes overflow")))
    }

    /// Start of rank `rank`'s slot.
    pub fn slot(&self, rank: usize) -> Result<usize> {
        if rank >= self.world {
            return Err(Error::invalid(format!(
                "rank {rank} out of range for world size {}",
                self.world
            )));
        }
        Ok(self.base + rank * self.stride)
    }

    /// Every slot start, in rank order.
    pub fn slots(&self) -> Vec<usize> {
        (0..self.world)
            .map(|r| self.base + r * self.stride)
            .collect()
    }

    /// Inverse of [`FlatLayout::slot`] for any address inside the span: `(rank, offset)`.
    pub fn locate(&self, addr: usize) -> Option<(usize, usize)> {
        let off = addr.checked_sub(self.base)?;
        let rank = off / self.stride.max(1);
        (rank < self.world).then(|| (rank, off - rank * self.stride))
    }

    /// Recover `(base, stride)` from a list of slot addresses, if they are evenly spaced.
    pub fn from_slots(slots: &[usize]) -> Option<(usize, usize)> {
        let base = *slots.first()?;
        let stride = if slots.len() > 1 {
            slots[1].checked_sub(base)?
        } else {
            0
        };
        slots
            .iter()
            .enumerate()
            .all(|(r, &p)| Some(p) == stride.checked_mul(r).and_then(|o| o.checked_add(base)))
            .then_some((base, stride))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_is_exact_on_boundaries() {
        let g = 2 << 20;
        assert_eq!(round_up(0, g).unwrap(), 0);
        assert_eq!(round_up(1, g).unwrap(), g);
        assert_eq!(round_up(g, g).unwrap(), g);
        assert_eq!(round_up(g + 1, g).unwrap(), 2 * g);
        assert!(round_up(usize::MAX, g).is_err());
        assert!(round_up(10, 3).is_err());
    }

    #[test]
    fn every_slot_round_trips_through_locate() {
        for world in 1..=9 {
            let l = FlatLayout::new(1 << 40, 4096, world).unwrap();
            for r in 0..world {
                let s = l.slot(r).unwrap();
                assert_eq!(s, l.base + r * 4096);
                assert_eq!(l.locate(s), Some((r, 0)));
                assert_eq!(l.locate(s + 4095), Some((r, 4095)));
            }
            assert!(l.slot(world).is_err());
            assert_eq!(l.locate(l.base + world * 4096), None);
            assert_eq!(l.locate(l.base - 1), None);
            let stride = if world == 1 { 0 } else { 4096 };
            assert_eq!(FlatLayout::from_slots(&l.slots()), Some((l.base, stride)));
        }
    }

    #[test]
    fn uneven_slots_are_not_flat() {
        assert_eq!(FlatLayout::from_slots(&[100, 200, 310]), None);
        assert_eq!(FlatLayout::from_slots(&[]), None);
        assert_eq!(FlatLayout::from_slots(&[7]), Some((7, 0)));
    }

    #[test]
    fn overflowing_spans_are_rejected() {
        assert!(FlatLayout::new(0, usize::MAX / 2, 3).is_err());
        assert!(FlatLayout::new(usize::MAX - 10, 4096, 1).is_err());
        assert!(FlatLayout::new(0, 4096, 0).is_err());
    }
}
