//! The flat-window layout: rank `r`'s slot starts at `base + r * stride`.
//!
//! All address arithmetic of the crate lives here so it can be tested exhaustively:
//! slots of a window ([`FlatLayout`]) and the signal-pad words inside them
//! ([`PadLayout`]).

use std::ops::Range;

use crate::error::{Error, Result};

/// Round `size` up to a multiple of `granularity` (a power of two). Zero stays zero.
#[inline]
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
    #[inline]
    pub fn slot(&self, rank: usize) -> Result<usize> {
        if rank >= self.world {
            return Err(Error::invalid(format!(
                "rank {rank} out of range for world size {}",
                self.world
            )));
        }
        // `new` checked that the whole span fits the address space.
        Ok(self.base + rank * self.stride)
    }

    /// Offset of rank `rank`'s slot from the start of the span.
    #[inline]
    pub fn offset_of(&self, rank: usize) -> Result<usize> {
        Ok(self.slot(rank)? - self.base)
    }

    /// Every slot start, in rank order.
    pub fn slots(&self) -> Vec<usize> {
        (0..self.world)
            .map(|r| self.base + r * self.stride)
            .collect()
    }

    /// Addresses of `len` bytes at byte `offset` of `rank`'s slot, checked to stay
    /// inside that slot.
    #[inline]
    pub fn slot_range(&self, rank: usize, offset: usize, len: usize) -> Result<Range<usize>> {
        let start = self.slot(rank)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.stride => Ok(start + offset..start + end),
            _ => Err(Error::invalid(format!(
                "{len} bytes at offset {offset} overrun a slot of {} bytes",
                self.stride
            ))),
        }
    }

    /// The layout of the sub-slots that start `offset` bytes into every slot (a pad
    /// inside a pool window's slots); `offset` must lie inside a slot.
    #[inline]
    pub fn at_offset(&self, offset: usize) -> Result<FlatLayout> {
        if offset >= self.stride.max(1) {
            return Err(Error::invalid(format!(
                "offset {offset} lies outside a slot of {} bytes",
                self.stride
            )));
        }
        FlatLayout::new(self.base + offset, self.stride, self.world)
    }

    /// Inverse of [`FlatLayout::slot`] for any address inside the span: `(rank, offset)`.
    #[inline]
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

/// Where a window's signal pads are, seen from one rank: rank `r`'s pad is `len`
/// bytes at the start of slot `r` of a [`FlatLayout`], holding one `u32` word per
/// (`channel`, `src`) at index `channel * world + src` (torch's protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadLayout {
    slots: FlatLayout,
    len: usize,
    rank: usize,
    /// Address of rank 0's poison mark (host pads only; see `poison`): rank `r`'s is
    /// `stride` bytes on per rank, outside its pad.
    marks: Option<usize>,
}

/// Bytes of one pad word.
const WORD: usize = std::mem::size_of::<u32>();

impl PadLayout {
    /// Pads of `len` bytes at the start of every slot of `slots`, seen from `rank`;
    /// the last rank's pad must fit the address space.
    pub fn new(slots: FlatLayout, len: usize, rank: usize) -> Result<Self> {
        (slots.world - 1)
            .checked_mul(slots.stride)
            .and_then(|last| last.checked_add(slots.base))
            .and_then(|last| last.checked_add(len))
            .ok_or_else(|| pad_error("signal pads overflow the address space".into()))?;
        Ok(PadLayout {
            slots,
            len,
            rank,
            marks: None,
        })
    }

    /// The same pads with a poison mark per rank, rank 0's at `rank0_mark` and the
    /// others a stride apart (host pads; the caller placed them outside every pad).
    pub fn with_marks(self, rank0_mark: usize) -> Self {
        PadLayout {
            marks: Some(rank0_mark),
            ..self
        }
    }

    /// Address of `owner`'s poison mark, where these pads have marks.
    #[inline]
    pub fn mark(&self, owner: usize) -> Option<usize> {
        let base = self.marks?;
        (owner < self.world()).then(|| base + owner * self.slots.stride)
    }

    /// Pads of `len` bytes, rank `r`'s at `base + r * stride`, seen from `rank`.
    pub fn from_parts(
        base: usize,
        stride: usize,
        len: usize,
        rank: usize,
        world: usize,
    ) -> Result<Self> {
        Self::new(FlatLayout::new(base, stride, world)?, len, rank)
    }

    /// Address of rank 0's pad.
    #[inline]
    pub fn base(&self) -> usize {
        self.slots.base
    }

    /// Distance between ranks' pads.
    #[inline]
    pub fn stride(&self) -> usize {
        self.slots.stride
    }

    /// Pad length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when a pad holds no word at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len < WORD
    }

    /// This process's rank.
    #[inline]
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[inline]
    pub fn world(&self) -> usize {
        self.slots.world
    }

    /// Channels a pad holds at this world size (one word per source rank each).
    #[inline]
    pub fn channels(&self) -> usize {
        self.len / WORD / self.world()
    }

    /// Where every rank's pad starts, as a flat layout of `stride()`-byte slots.
    pub fn slots(&self) -> FlatLayout {
        self.slots
    }

    /// Byte offset inside a pad of the word for (`channel`, `src`), checked to fit.
    #[inline]
    pub fn slot_offset(&self, channel: usize, src: usize) -> Result<usize> {
        let world = self.world();
        channel
            .checked_mul(world)
            .and_then(|i| i.checked_add(src))
            .and_then(|i| i.checked_mul(WORD))
            .filter(|&offset| src < world && offset + WORD <= self.len)
            .ok_or_else(|| {
                pad_error(format!(
                    "channel {channel} does not fit a signal pad of {} bytes at world size {world}",
                    self.len
                ))
            })
    }

    /// Address of the word for (`channel`, `src`) in `owner`'s pad, checked to fit.
    #[inline]
    pub fn word(&self, owner: usize, channel: usize, src: usize) -> Result<usize> {
        self.check_peer(owner)?;
        let offset = self.slot_offset(channel, src)?;
        // `new` checked that every rank's whole pad fits the address space.
        Ok(self.slots.base + owner * self.slots.stride + offset)
    }

    /// Check that `peer` is a rank of this layout.
    #[inline]
    pub fn check_peer(&self, peer: usize) -> Result<()> {
        if peer < self.world() {
            return Ok(());
        }
        Err(pad_error(format!(
            "rank {peer} out of range for world size {}",
            self.world()
        )))
    }
}

fn pad_error(what: String) -> Error {
    Error::new(
        crate::error::Phase::Signal,
        crate::error::ErrorKind::InvalidArgument(what),
    )
}

/// Where pad `slot` lies among pool windows that hold `per_pool` pads of `pad_size`
/// bytes each: which pool, and the byte offset inside every rank's slot of that pool.
#[inline]
pub fn pad_place(slot: usize, per_pool: usize, pad_size: usize) -> (usize, usize) {
    (slot / per_pool, (slot % per_pool) * pad_size)
}

/// The rows of a strided tile, as byte ranges from its first element: `rows` rows of
/// `cols` elements of `elem_size` bytes, starting `row_stride` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileRows {
    /// Rows of the tile.
    pub rows: usize,
    /// Elements of one row.
    pub cols: usize,
    /// Elements from one row's start to the next one's.
    pub row_stride: usize,
    /// Bytes of one element.
    pub elem_size: usize,
}

impl TileRows {
    /// Bytes of one row.
    #[inline]
    pub fn row_len(&self) -> usize {
        self.cols * self.elem_size
    }

    /// Byte range of row `row`. The tile's extent ([`TileRows::extent_bytes`]) must
    /// have been checked, so that nothing here overflows.
    #[inline]
    pub fn row(&self, row: usize) -> Range<usize> {
        let start = row * self.row_stride * self.elem_size;
        start..start + self.row_len()
    }

    /// Every row's byte range, in order.
    pub fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.rows).map(|r| self.row(r))
    }

    /// Bytes from the first element to one past the last (0 for an empty tile), or
    /// `None` when that overflows.
    #[inline]
    pub fn extent_bytes(&self) -> Option<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Some(0);
        }
        (self.rows - 1)
            .checked_mul(self.row_stride)?
            .checked_add(self.cols)?
            .checked_mul(self.elem_size)
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

    #[test]
    fn slot_ranges_stay_inside_their_slot() {
        for world in 1..=5 {
            let l = FlatLayout::new(1 << 30, 256, world).unwrap();
            for r in 0..world {
                let s = l.slot(r).unwrap();
                assert_eq!(l.slot_range(r, 0, 256).unwrap(), s..s + 256);
                assert_eq!(l.slot_range(r, 16, 8).unwrap(), s + 16..s + 24);
                assert_eq!(l.slot_range(r, 256, 0).unwrap(), s + 256..s + 256);
                assert!(l.slot_range(r, 250, 7).is_err());
                assert!(l.slot_range(r, 257, 0).is_err());
                assert!(l.slot_range(r, usize::MAX, 2).is_err());
                for at in [0, 1, 255] {
                    let sub = l.at_offset(at).unwrap();
                    assert_eq!(sub.slot(r).unwrap(), s + at);
                    assert_eq!((sub.stride, sub.world), (256, world));
                }
            }
            assert!(l.slot_range(world, 0, 1).is_err());
            assert!(l.at_offset(256).is_err());
        }
        let single = FlatLayout::new(64, 0, 1).unwrap();
        assert_eq!(single.at_offset(0).unwrap(), single);
        assert!(single.at_offset(1).is_err());
    }

    #[test]
    fn every_pad_word_is_where_torch_puts_it() {
        for world in 1..=6 {
            let slots = FlatLayout::new(1 << 32, 1 << 12, world).unwrap();
            let channels = 3;
            let pads = PadLayout::new(slots, channels * world * 4, world - 1).unwrap();
            assert_eq!(pads.channels(), channels);
            assert_eq!(pads.slots(), slots);
            assert_eq!((pads.base(), pads.stride()), (1 << 32, 1 << 12));
            for owner in 0..world {
                for channel in 0..channels {
                    for src in 0..world {
                        let index = channel * world + src;
                        let word = pads.word(owner, channel, src).unwrap();
                        assert_eq!(word, slots.slot(owner).unwrap() + 4 * index);
                        assert_eq!(slots.locate(word), Some((owner, 4 * index)));
                        assert_eq!(pads.slot_offset(channel, src).unwrap(), 4 * index);
                    }
                    assert!(pads.slot_offset(channel, world).is_err());
                }
                assert!(pads.word(owner, channels, 0).is_err());
            }
            assert!(pads.word(world, 0, 0).is_err());
            assert!(pads.check_peer(world).is_err());
            assert!(pads.check_peer(world - 1).is_ok());
        }
    }

    #[test]
    fn pad_errors_are_signal_arguments() {
        let pads = PadLayout::new(FlatLayout::new(4096, 4096, 2).unwrap(), 8, 0).unwrap();
        assert!(!pads.is_empty());
        let err = pads.slot_offset(1, 0).unwrap_err();
        assert_eq!(err.phase(), crate::error::Phase::Signal);
        assert!(matches!(
            err.kind(),
            crate::error::ErrorKind::InvalidArgument(_)
        ));
        assert!(pads.slot_offset(usize::MAX, 1).is_err());
        let end = FlatLayout::new(usize::MAX - 8192, 4096, 2).unwrap();
        assert!(PadLayout::new(end, 4096, 0).is_ok());
        assert!(PadLayout::new(end, 4097 + 4096, 0).is_err());
    }

    #[test]
    fn a_slot_offset_is_rank_times_stride_inside_the_world() {
        let l = FlatLayout::new(0x1000, 256, 4).unwrap();
        assert_eq!(l.offset_of(0).unwrap(), 0);
        assert_eq!(l.offset_of(3).unwrap(), 768);
        assert_eq!(l.slot(3).unwrap(), 0x1000 + l.offset_of(3).unwrap());
        assert!(l.offset_of(4).is_err());
    }

    #[test]
    fn pads_fill_one_pool_before_the_next() {
        assert_eq!(pad_place(0, 4, 64), (0, 0));
        assert_eq!(pad_place(3, 4, 64), (0, 192));
        assert_eq!(pad_place(4, 4, 64), (1, 0));
        assert_eq!(pad_place(9, 4, 64), (2, 64));
    }

    #[test]
    fn tile_rows_are_strided_byte_ranges() {
        let t = TileRows {
            rows: 3,
            cols: 2,
            row_stride: 5,
            elem_size: 4,
        };
        assert_eq!(t.row_len(), 8);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![0..8, 20..28, 40..48]);
        assert_eq!(t.extent_bytes(), Some(48));
        let empty = TileRows { rows: 0, ..t };
        assert_eq!(empty.extent_bytes(), Some(0));
        assert_eq!(empty.iter().count(), 0);
        let huge = TileRows {
            rows: 2,
            row_stride: usize::MAX,
            ..t
        };
        assert_eq!(huge.extent_bytes(), None);
    }
}
