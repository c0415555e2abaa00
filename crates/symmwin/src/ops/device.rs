//! The provider-facing interface of the ops: one implementation per provider.
//!
//! NOTE [ops protocol]
//! Every op is collective over the ranks of its windows' group except `put`, `get`,
//! `put_with_signal`, `wait_for_signal`, `put_signal` and `wait_signal`, which are
//! one-sided. A collective op is complete on every rank when it returns on the
//! stream: the outputs are readable, the inputs may be reused, and the signal pads
//! are back to zero. Collective ops synchronize only on [`OpContext::channel`] of
//! [`OpContext::pads`], with torch's pad protocol (slot `channel * world + src` of
//! the receiver's pad, CAS 0 -> 1 with release to signal, CAS 1 -> 0 with acquire to
//! wait).
//!
//! Split tables are read where they are (host memory, or device memory on the
//! device): a device implementation never copies them to the host. A split that would
//! move rows past an operand's room is never executed: the op moves nothing for it
//! and reports which peer, how many rows and how much room, when it returns (host)
//! or at the next [`DeviceOps::check_errors`] / synchronization (device).

use crate::error::{Error, ErrorKind, Phase, Result};

use super::args::{OpContext, ReduceOp, SignalWait, SymmBuf, Tile, VarArgs};

/// The ops of one provider, over flat-layout addresses.
///
/// Every method is `unsafe`: the caller ([`super::collective`]) guarantees that each
/// [`SymmBuf`] describes memory mapped in this process at `addr(r)` for every rank
/// `r` with at least `room` bytes (and `len` bytes for this rank), that the mapping
/// lives until the op has completed on its stream, and that `ctx.pads` are the live
/// pads of the group the operands belong to. Implementations must not access a byte
/// outside those ranges whatever the split tables say.
pub trait DeviceOps: Send + Sync {
    /// Report an error recorded by an earlier asynchronous op (a split larger than its
    /// output, a peer that never signalled), once. Host implementations report
    /// errors on return and have nothing here.
    fn check_errors(&self) -> Result<()> {
        Ok(())
    }

    /// Equal-split all-to-all: block `j` (`bytes_per_peer` bytes at `j *
    /// bytes_per_peer`) of this rank's `input` lands at block `rank` of rank `j`'s
    /// `out` (torch's `nvshmem_all_to_all`).
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn all_to_all(
        &self,
        ctx: &OpContext,
        input: &SymmBuf,
        out: &SymmBuf,
        bytes_per_peer: usize,
    ) -> Result<()>;

    /// torch's `all_to_all_vdev`: `in_splits[j]` rows (after the exclusive prefix
    /// sum of the splits before it) go to rank `j`; `out_splits_offsets[0][i]` is
    /// set to the rows received from rank `i` and `[1][i]` to where they start.
    /// `args.experts_per_rank` is 1.
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn all_to_all_vdev(&self, ctx: &OpContext, args: &VarArgs) -> Result<()>;

    /// torch's `all_to_all_vdev_2d` (MoE dispatch): rank-major input chunks to
    /// expert-major output, each local expert's block aligned to `major_align` rows
    /// (>= 1) and at least `major_align` rows long (see [`super::plan`]).
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn all_to_all_vdev_2d(
        &self,
        ctx: &OpContext,
        args: &VarArgs,
        major_align: usize,
    ) -> Result<()>;

    /// torch's `all_to_all_vdev_2d_offset` (MoE combine): expert-major input chunks
    /// at explicit offsets (`in_splits` is `[2, E*W]`) to rank-major output, packed.
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn all_to_all_vdev_2d_offset(&self, ctx: &OpContext, args: &VarArgs) -> Result<()>;

    /// Copy the first `len` bytes of `root`'s `buf` into every rank's `buf`.
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn broadcast(
        &self,
        ctx: &OpContext,
        buf: &SymmBuf,
        len: usize,
        root: usize,
    ) -> Result<()>;

    /// One-sided: copy the first `len` bytes of this rank's `buf` into `peer`'s `buf`.
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn put(&self, ctx: &OpContext, buf: &SymmBuf, len: usize, peer: usize) -> Result<()>;

    /// One-sided: copy the first `len` bytes of `peer`'s `buf` into this rank's `buf`.
    ///
    /// # Safety
    /// See the trait documentation.
    unsafe fn get(&self, ctx: &OpContext, buf: &SymmBuf, len: usize, peer: usize) -> Result<()>;

    /// One-sided: [`DeviceOps::put`], then set the `u64` at `peer`'s `sig` to
    /// `value` with release ordering (torch's `nvshmem_put_with_signal`).
    ///
    /// # Safety
    /// See the trait documentation; `sig` is 8-byte aligned with 8 bytes of room.
    unsafe fn put_with_signal(
        &self,
        ctx: &OpContext,
        buf: &SymmBuf,
        len: usize,
        sig: &SymmBuf,
        value: u64,
        peer: usize,
    ) -> Result<()>;

    /// Wait until the `u64` at this process's address `wait.word` equals `wait.value`
    /// (acquire), then reset it to zero so a pad is zero at rest and the same value can
    /// be sent again. A local wait: the word need not be in a window this rank knows
    /// (torch passes a view of a signal pad).
    ///
    /// # Safety
    /// `wait.word` is an 8-byte aligned, live `u64` of this provider's memory, accessed
    /// only atomically while the op runs.
    unsafe fn wait_for_signal(&self, wait: &SignalWait) -> Result<()>;

    /// One-sided: copy `len` bytes from this process's address `src` (any memory of
    /// this provider, not necessarily symmetric) into `peer`'s `dst`, then signal
    /// `peer` on channel 0 of `ctx.pads` (the pad protocol; torch's
    /// `nccl_put_signal`). The receiver's `wait_signal` is
    /// [`crate::provider::Signals::wait`] on the same channel.
    ///
    /// # Safety
    /// See the trait documentation; `src..src+len` is readable and live.
    unsafe fn put_signal(
        &self,
        ctx: &OpContext,
        src: usize,
        len: usize,
        dst: &SymmBuf,
        peer: usize,
    ) -> Result<()>;

    /// Tile reduce: for each `i`, rank `roots[i]` gets into its `out` the reduction
    /// over all ranks of their `ins[i]` tile. `single root` is `ins.len() == 1`.
    /// Roots are distinct; a rank that is no root only contributes.
    ///
    /// # Safety
    /// See the trait documentation; every operand holds `tile.extent_bytes()` bytes.
    unsafe fn tile_reduce(
        &self,
        ctx: &OpContext,
        ins: &[SymmBuf],
        roots: &[usize],
        out: &SymmBuf,
        tile: &Tile,
        op: ReduceOp,
    ) -> Result<()>;
}

/// The ops of a provider that does not implement them (yet): every call is a clear
/// [`ErrorKind::Unsupported`] error naming the provider and the op.
#[derive(Debug, Clone, Copy)]
pub struct UnsupportedOps {
    /// The provider's name, for the message.
    pub provider: &'static str,
}

impl UnsupportedOps {
    fn refuse(&self, op: &str) -> Result<()> {
        Err(Error::new(
            Phase::Argument,
            ErrorKind::Unsupported(format!(
                "{op} is not implemented for {} memory in this build",
                self.provider
            )),
        ))
    }
}

impl DeviceOps for UnsupportedOps {
    unsafe fn all_to_all(&self, _: &OpContext, _: &SymmBuf, _: &SymmBuf, _: usize) -> Result<()> {
        self.refuse("all_to_all")
    }

    unsafe fn all_to_all_vdev(&self, _: &OpContext, _: &VarArgs) -> Result<()> {
        self.refuse("all_to_all_vdev")
    }

    unsafe fn all_to_all_vdev_2d(&self, _: &OpContext, _: &VarArgs, _: usize) -> Result<()> {
        self.refuse("all_to_all_vdev_2d")
    }

    unsafe fn all_to_all_vdev_2d_offset(&self, _: &OpContext, _: &VarArgs) -> Result<()> {
        self.refuse("all_to_all_vdev_2d_offset")
    }

    unsafe fn broadcast(&self, _: &OpContext, _: &SymmBuf, _: usize, _: usize) -> Result<()> {
        self.refuse("broadcast")
    }

    unsafe fn put(&self, _: &OpContext, _: &SymmBuf, _: usize, _: usize) -> Result<()> {
        self.refuse("put")
    }

    unsafe fn get(&self, _: &OpContext, _: &SymmBuf, _: usize, _: usize) -> Result<()> {
        self.refuse("get")
    }

    unsafe fn put_with_signal(
        &self,
        _: &OpContext,
        _: &SymmBuf,
        _: usize,
        _: &SymmBuf,
        _: u64,
        _: usize,
    ) -> Result<()> {
        self.refuse("put_with_signal")
    }

    unsafe fn wait_for_signal(&self, _: &SignalWait) -> Result<()> {
        self.refuse("wait_for_signal")
    }

    unsafe fn put_signal(
        &self,
        _: &OpContext,
        _: usize,
        _: usize,
        _: &SymmBuf,
        _: usize,
    ) -> Result<()> {
        self.refuse("put_signal")
    }

    unsafe fn tile_reduce(
        &self,
        _: &OpContext,
        _: &[SymmBuf],
        _: &[usize],
        _: &SymmBuf,
        _: &Tile,
        _: ReduceOp,
    ) -> Result<()> {
        self.refuse("tile_reduce")
    }
}
