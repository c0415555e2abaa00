//! One op as the safe layer hands it to a provider: which op, and its operands,
//! already checked against their windows.

use super::args::{ReduceOp, SymmBuf, Tile, VarArgs};
use super::plan::Shape;

/// One op of [`super::DeviceOps::execute`], with the semantics of torch's NVSHMEM ops.
#[derive(Debug, Clone, Copy)]
pub enum OpRequest<'a> {
    /// Equal-split all-to-all: chunk `j` (`chunk` bytes at `j * chunk`) of this rank's
    /// `input` lands at chunk `rank` of rank `j`'s `out` (torch's
    /// `nvshmem_all_to_all`).
    AllToAll {
        /// Every rank's input.
        input: &'a SymmBuf,
        /// Every rank's output.
        out: &'a SymmBuf,
        /// Bytes each rank sends each peer.
        chunk: usize,
    },
    /// The all-to-all-v family, by shape: torch's `all_to_all_vdev` ([`Shape::Flat`]:
    /// `in_splits[j]` rows go to rank `j`, `out_splits_offsets[0][i]` is set to the
    /// rows received from rank `i` and `[1][i]` to where they start;
    /// `experts_per_rank` is 1), `all_to_all_vdev_2d` ([`Shape::Dispatch`], MoE
    /// dispatch: rank-major input chunks to expert-major output, each local expert's
    /// block aligned to `major_align` rows, see [`super::plan`]) and
    /// `all_to_all_vdev_2d_offset` ([`Shape::Combine`], MoE combine: expert-major
    /// input chunks at explicit offsets, `in_splits` `[2, E*W]`, to rank-major output,
    /// packed).
    AllToAllV {
        /// Which member of the family.
        shape: Shape,
        /// Operands, split tables and row geometry.
        args: &'a VarArgs,
    },
    /// Copy the first `len` bytes of `root`'s `buf` into every rank's `buf`.
    Broadcast {
        /// The operand on every rank.
        buf: &'a SymmBuf,
        /// Bytes to copy.
        len: usize,
        /// The rank whose bytes everyone gets.
        root: usize,
    },
    /// One-sided: copy the first `len` bytes of this rank's `buf` into `peer`'s `buf`.
    Put(Transfer<'a>),
    /// One-sided: copy the first `len` bytes of `peer`'s `buf` into this rank's `buf`.
    Get(Transfer<'a>),
    /// One-sided: [`OpRequest::Put`], then set the `u64` at the peer's `sig` (8-byte
    /// aligned, 8 bytes of room) to `value` with release ordering (torch's
    /// `nvshmem_put_with_signal`).
    PutWithSignal {
        /// The data.
        put: Transfer<'a>,
        /// The signal word on both ranks.
        sig: &'a SymmBuf,
        /// The value the peer's word is set to.
        value: u64,
    },
    /// One-sided: copy `len` bytes from this process's address `src` (any memory of
    /// this provider, not necessarily symmetric, readable and live) into `peer`'s
    /// `dst`, then signal `peer` on channel 0 of the context's pads (the pad protocol;
    /// torch's `nccl_put_signal`). The receiver's `wait_signal` is
    /// a [`crate::provider::PadSignal::Wait`] on the same channel.
    PutSignal {
        /// Address of the source bytes in this process.
        src: usize,
        /// Bytes to copy.
        len: usize,
        /// The destination on every rank.
        dst: &'a SymmBuf,
        /// The receiver.
        peer: usize,
    },
    /// Tile reduce (see [`TileReduce`]).
    TileReduce(TileReduce<'a>),
}

/// Tile reduce: for each `i`, rank `roots[i]` gets into its `out` the reduction over
/// all ranks of their `ins[i]` tile; every operand holds `tile.extent_bytes()` bytes.
/// One root is `ins.len() == 1`. Roots are distinct; a rank that is no root only
/// contributes.
#[derive(Debug, Clone, Copy)]
pub struct TileReduce<'a> {
    /// One input tile per root.
    pub ins: &'a [SymmBuf],
    /// The rank that receives each tile's reduction.
    pub roots: &'a [usize],
    /// Where a root receives its reduction.
    pub out: &'a SymmBuf,
    /// The tile geometry.
    pub tile: &'a Tile,
    /// The reduction.
    pub op: ReduceOp,
}

impl TileReduce<'_> {
    /// Which of the tiles this rank is the root of, if any.
    pub fn root_index(&self, rank: usize) -> Option<usize> {
        self.roots.iter().position(|&r| r == rank)
    }
}

/// The first `len` bytes of `buf`, moved one-sided between this rank and `peer`.
#[derive(Debug, Clone, Copy)]
pub struct Transfer<'a> {
    /// The operand on both ranks.
    pub buf: &'a SymmBuf,
    /// Bytes to move.
    pub len: usize,
    /// The other rank.
    pub peer: usize,
}

impl OpRequest<'_> {
    /// torch's name of the op, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            OpRequest::AllToAll { .. } => "all_to_all",
            OpRequest::AllToAllV { shape, .. } => var_name(*shape),
            OpRequest::Broadcast { .. } => "broadcast",
            OpRequest::Put(_) => "put",
            OpRequest::Get(_) => "get",
            OpRequest::PutWithSignal { .. } => "put_with_signal",
            OpRequest::PutSignal { .. } => "put_signal",
            OpRequest::TileReduce(r) if r.ins.len() > 1 => "multi_root_tile_reduce",
            OpRequest::TileReduce(_) => "tile_reduce",
        }
    }
}

/// torch's name of the member `shape` of the all-to-all-v family.
pub fn var_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Flat => "all_to_all_vdev",
        Shape::Dispatch { .. } => "all_to_all_vdev_2d",
        Shape::Combine => "all_to_all_vdev_2d_offset",
    }
}
