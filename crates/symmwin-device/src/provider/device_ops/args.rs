//! The argument types of [`super::DeviceOps`]: operands as flat-layout addresses,
//! row geometry, tiles, and the synchronization context of one call.
//!
//! Nothing here knows a tensor. The safe layer ([`super::collective`]) builds these
//! from windows and byte offsets after checking every range; a provider receives
//! them already checked and must stay inside them.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::layout::{FlatLayout, TileRows};
use crate::provider::{PadLayout, SignalAt, StreamHandle};

use super::dtype::DType;
use super::Engine;

/// One operand on every rank: rank `r`'s copy starts at `layout.slot(r) + offset`.
///
/// `len` is this rank's operand (its tensor's bytes); `room` is what every rank's
/// slot holds from `offset` on (the window's usable size minus `offset`). A peer's
/// tensor may be shorter or longer than ours, so accesses to a peer's copy are bounded
/// by `room`, and accesses to our own by `len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymmBuf {
    /// The window's flat layout (base, stride, world).
    pub layout: FlatLayout,
    /// Byte offset of the operand inside each rank's slot.
    pub offset: usize,
    /// Bytes of this rank's operand.
    pub len: usize,
    /// Bytes mapped and usable from `offset` to the end of every rank's slot.
    pub room: usize,
}

impl SymmBuf {
    /// Address of `rank`'s copy of the operand (the one place the layout math is done).
    pub fn addr(&self, rank: usize) -> Result<usize> {
        Ok(self.layout.slot(rank)? + self.offset)
    }

    /// Address of `len` bytes at byte `at` of `rank`'s copy, checked against the room
    /// every rank has (`room`), so a wrong split can never reach past a peer's slot.
    pub fn range(&self, rank: usize, at: usize, len: usize) -> Result<usize> {
        match at.checked_add(len) {
            Some(end) if end <= self.room => Ok(self.addr(rank)? + at),
            _ => Err(Error::invalid(format!(
                "{len} bytes at byte {at} overrun rank {rank}'s operand ({} bytes of room)",
                self.room
            ))),
        }
    }
}

/// A local wait for a `u64` signal word (`wait_for_signal`): until the word at this
/// process's address `word` equals `value`. `rank` is the waiting rank and `peer` the
/// expected sender, both named in a timeout; the wait is ordered on `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalWait {
    /// Address of the word in this process.
    pub word: usize,
    /// The value that ends the wait.
    pub value: u64,
    /// The waiting rank (a world rank: the word belongs to no group here).
    pub rank: usize,
    /// The expected sender.
    pub peer: usize,
    /// How long to wait.
    pub timeout: Duration,
    /// The stream the wait is ordered on (device providers).
    pub stream: StreamHandle,
    /// The group's watched peers: a host wait for one that has ended fails early.
    pub peers: crate::peer_watch::PeerSet,
}

/// Row geometry of the all-to-all-v family: splits and offsets count rows of dim 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Bytes per row (`stride(0) * element_size`, equal for input and out).
    pub row_bytes: usize,
    /// Rows of this rank's input.
    pub in_rows: usize,
    /// Rows of this rank's out.
    pub out_rows: usize,
}

/// Operands of `all_to_all_vdev`, `all_to_all_vdev_2d` and `all_to_all_vdev_2d_offset`.
///
/// Split tables are contiguous `int64` arrays in symmetric memory, with torch's
/// layouts (W = world size, E = `experts_per_rank`):
/// - `all_to_all_vdev`: `in_splits` is `[W]`; `out_splits_offsets` is `[2, W]`:
///   rows received from each rank, then their exclusive prefix sums.
/// - `all_to_all_vdev_2d` (dispatch): `in_splits` is `[W*E]` rank-major
///   (`peer*E + e`); `out_splits_offsets` is `[2, E*W]` expert-major (`e*W + src`),
///   each expert's block starting at a multiple of `major_align` and at least
///   `major_align` rows long.
/// - `all_to_all_vdev_2d_offset` (combine): `in_splits` is `[2, E*W]` expert-major
///   splits and explicit input offsets; `out_splits_offsets` is `[2, W*E]`
///   rank-major, offsets the plain exclusive prefix sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarArgs {
    /// Rows to send.
    pub input: SymmBuf,
    /// Rows received.
    pub out: SymmBuf,
    /// Input splits (and, for `_2d_offset`, input offsets).
    pub in_splits: SymmBuf,
    /// Output splits and offsets, written by the op.
    pub out_splits_offsets: SymmBuf,
    /// Row geometry.
    pub rows: Rows,
    /// Experts per rank (1 for `all_to_all_vdev`).
    pub experts_per_rank: usize,
}

/// Element types a reduction understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F64 => 8,
            ElemType::F16 | ElemType::BF16 => 2,
        }
    }
}

/// Reduction operators (torch 2.11 defines only `sum` for the tile ops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
}

impl std::str::FromStr for ReduceOp {
    type Err = Error;

    fn from_str(s: &str) -> Result<ReduceOp> {
        match s {
            "sum" => Ok(ReduceOp::Sum),
            other => Err(Error::invalid(format!(
                "reduce_op {other:?} is not supported (only \"sum\")"
            ))),
        }
    }
}

/// A strided 2-D tile: `rows` rows of `cols` contiguous elements, `row_stride`
/// elements apart. The same geometry on every rank and for every tile of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// Number of rows.
    pub rows: usize,
    /// Elements per row (unit inner stride).
    pub cols: usize,
    /// Elements between the starts of consecutive rows (>= `cols`).
    pub row_stride: usize,
    /// Element type.
    pub elem: ElemType,
}

impl Tile {
    /// Bytes from the first element to one past the last (0 for an empty tile).
    pub fn extent_bytes(&self) -> Option<usize> {
        self.row_layout().extent_bytes()
    }

    /// Its rows as byte ranges from the first element.
    pub fn row_layout(&self) -> TileRows {
        TileRows {
            rows: self.rows,
            cols: self.cols,
            row_stride: self.row_stride,
            elem_size: self.elem.size(),
        }
    }
}

/// The signal word of an op with nothing to compare (torch's pad protocol constant).
pub const PLAIN_SIGNAL: u32 = 1;

/// What an op's operands hold: their dtype and the bytes per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elements {
    /// The dtype the caller named ([`DType::UNSPECIFIED`] when it named none).
    pub dtype: DType,
    /// Bytes per element (1 for untyped bytes).
    pub size: usize,
}

impl Elements {
    /// Untyped bytes.
    pub const BYTES: Elements = Elements {
        dtype: DType::UNSPECIFIED,
        size: 1,
    };

    /// Elements of `dtype`, of its size where symmwin knows it (else bytes).
    pub fn of(dtype: DType) -> Elements {
        Elements {
            dtype,
            size: dtype.size().unwrap_or(1),
        }
    }

    /// "1 float32 element", "8 int32 elements", "4 elements of 8 bytes" (untyped).
    pub fn count(self, n: usize) -> String {
        let plural = if n == 1 { "" } else { "s" };
        if self.dtype == DType::UNSPECIFIED {
            format!("{n} element{plural} of {} bytes", self.size)
        } else {
            format!("{n} {} element{plural}", self.dtype)
        }
    }
}

/// The fingerprint of one rank's call of one op (computed and compared as NOTE [operand fingerprint]
/// in `fingerprint.rs` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// The 64-bit hash; 0 for a one-sided op.
    value: u64,
    /// What the caller's operands hold, for messages.
    elems: Elements,
}

impl Fingerprint {
    /// A fingerprint of `value` (0: nothing to compare) for a call whose operands hold
    /// `elems`.
    pub const fn new(value: u64, elems: Elements) -> Fingerprint {
        Fingerprint { value, elems }
    }

    /// The fingerprint of an op with nothing to compare (tests, one-sided ops).
    pub const NONE: Fingerprint = Fingerprint {
        value: 0,
        elems: Elements::BYTES,
    };

    /// The 64-bit value.
    pub fn value(self) -> u64 {
        self.value
    }

    /// The 32-bit word a provider sends in its entry signal: never 0 (a pad word at
    /// rest) nor `PLAIN_SIGNAL` for a collective, so a peer at another op (or at a
    /// plain signal) never matches by accident of the constant.
    pub fn word(self) -> u32 {
        if self.value == 0 {
            return PLAIN_SIGNAL;
        }
        let folded = (self.value ^ (self.value >> 32)) as u32;
        if folded <= PLAIN_SIGNAL {
            folded + 2
        } else {
            folded
        }
    }

    /// What the caller's operands hold, for messages.
    pub fn elems(self) -> Elements {
        self.elems
    }
}

/// Everything a provider needs to synchronize one op with the other ranks.
#[derive(Debug, Clone, Copy)]
pub struct OpContext {
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world: usize,
    /// Signal pads the op synchronizes on (those of its first operand's window).
    pub pads: PadLayout,
    /// The pad channel reserved for ops (the last channel of the pad, see
    /// `ops_channel`), so an op never consumes a signal meant for a user's
    /// `put_signal` / `wait_signal` / `barrier` on the low channels.
    pub channel: usize,
    /// How long a wait for a peer may take before the op fails naming it.
    pub timeout: Duration,
    /// CUDA stream the op is ordered on (ignored for host memory).
    pub stream: StreamHandle,
    /// Engine for ops whose sizes are known on the host, already resolved.
    pub engine: Engine,
    /// The group's watched peers: a host wait for one that has ended fails early.
    pub peers: crate::peer_watch::PeerSet,
    /// What every rank must pass alike to this op, compared where the op synchronizes
    /// (see `fingerprint.rs`).
    pub fingerprint: Fingerprint,
}

impl OpContext {
    /// The op's channel, timeout and stream, for a signal operation on its pads.
    pub fn signal_at(&self) -> SignalAt {
        SignalAt::new(self.channel, self.timeout, self.stream).watching(self.peers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_bounded_by_the_room_of_every_rank() {
        let buf = SymmBuf {
            layout: FlatLayout::new(1 << 30, 1 << 20, 4).unwrap(),
            offset: 4096,
            len: 100,
            room: 1000,
        };
        assert_eq!(buf.addr(2).unwrap(), (1 << 30) + 2 * (1 << 20) + 4096);
        assert_eq!(buf.range(3, 900, 100).unwrap(), buf.addr(3).unwrap() + 900);
        assert!(buf.range(3, 901, 100).is_err());
        assert!(buf.range(4, 0, 1).is_err());
        assert!(buf.range(0, usize::MAX, 2).is_err());
    }

    #[test]
    fn tile_extent_counts_the_last_row_only_to_its_end() {
        let t = Tile {
            rows: 3,
            cols: 4,
            row_stride: 10,
            elem: ElemType::BF16,
        };
        assert_eq!(t.extent_bytes(), Some((2 * 10 + 4) * 2));
        assert_eq!(Tile { rows: 0, ..t }.extent_bytes(), Some(0));
    }
}
