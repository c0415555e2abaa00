//! The one-sided ops: put / get (SM copy or copy engine), the 64-bit value signal of
//! `put_with_signal` / `wait_for_signal`, and `put_signal` (copy, then a pad signal).

use super::super::signals::MAX_WORLD;
use super::grid::{self, COPY_ENGINE_MIN_ONE_SIDED};
use super::params::{OpId, Operand, COPY_GET, COPY_PUT, THREADS};
use super::CudaOps;
use symmwin_device::error::{Error, Result};
use symmwin_device::peer_watch::PeerSet;
use symmwin_device::provider::{PadSignal, SignalAt, Signals};

use symmwin_device::provider::device_ops::{OpContext, SignalWait, SymmBuf, Transfer};

/// Which way `put` / `get` copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// Ours into the peer's.
    Put,
    /// The peer's into ours.
    Get,
}

impl CudaOps {
    pub(super) fn transfer(
        &self,
        ctx: &OpContext,
        transfer: &Transfer,
        direction: Direction,
    ) -> Result<()> {
        let Transfer { buf, len, peer } = *transfer;
        check_peer(ctx, peer)?;
        if len > buf.len {
            return Err(Error::invalid(format!(
                "{len} bytes from a {}-byte operand",
                buf.len
            )));
        }
        let remote = buf.range(peer, 0, len)?;
        let local = buf.range(ctx.rank, 0, len)?;
        if len == 0 {
            return Ok(());
        }
        let (dst, src, op, mode) = match direction {
            Direction::Put => (remote, local, OpId::Put, COPY_PUT),
            Direction::Get => (local, remote, OpId::Get, COPY_GET),
        };
        if grid::use_copy_engine(ctx.engine, len, COPY_ENGINE_MIN_ONE_SIDED) {
            return self.copy_engine(ctx, dst, src, len);
        }
        let mut p = self.base_params(ctx, op)?;
        p.src = Operand::of(buf);
        p.dst = Operand::of(buf);
        p.bytes = len as u64;
        p.peer = peer as u32;
        p.mode = mode;
        self.launch(|k| k.copy, grid::copy_blocks(len), THREADS, ctx.stream, &p)
    }

    /// Sets the 64-bit word at `peer`'s `sig` to `value`, after everything before it on
    /// the stream has reached the peer.
    pub(super) fn set_value(
        &self,
        ctx: &OpContext,
        sig: &SymmBuf,
        value: u64,
        peer: usize,
    ) -> Result<()> {
        check_peer(ctx, peer)?;
        check_word(sig.range(peer, 0, 8)?)?;
        let mut p = self.base_params(ctx, OpId::PutWithSignal)?;
        p.dst_splits = Operand::of(sig);
        p.value = value;
        p.peer = peer as u32;
        self.launch(|k| k.set_value, 1, 32, ctx.stream, &p)
    }

    /// Waits until the 64-bit word at our address `wait.word` is `wait.value`, then
    /// zeroes it.
    pub(super) fn wait_value(&self, wait: &SignalWait) -> Result<()> {
        if wait.word == 0 {
            return Err(Error::invalid("a signal word at address 0"));
        }
        check_word(wait.word)?;
        // The marks are indexed by the group's ranks: only a peer of the group looks.
        let peers = if wait.peer < MAX_WORLD {
            wait.peers
        } else {
            PeerSet::NONE
        };
        let mut p = self.local_params(OpId::WaitForSignal, wait.rank, wait.timeout, peers)?;
        p.dst_splits = Operand {
            base: wait.word as u64,
            stride: 0,
            offset: 0,
            bytes: 8,
        };
        p.value = wait.value;
        p.peer = u32::try_from(wait.peer).map_err(|_| Error::invalid("peer exceeds u32"))?;
        self.launch(|k| k.wait_value, 1, 32, wait.stream, &p)
    }

    /// `len` bytes from our address `src` into `peer`'s `dst`, then a pad signal to
    /// `peer` on channel 0 (what `wait_signal` waits for).
    pub(super) fn copy_and_signal(
        &self,
        ctx: &OpContext,
        src: usize,
        len: usize,
        dst: &SymmBuf,
        peer: usize,
    ) -> Result<()> {
        check_peer(ctx, peer)?;
        let remote = dst.range(peer, 0, len)?;
        ctx.pads.slot_offset(0, ctx.world - 1)?;
        let mut p = self.base_params(ctx, OpId::PutSignal)?;
        if len > 0 && grid::use_copy_engine(ctx.engine, len, COPY_ENGINE_MIN_ONE_SIDED) {
            self.copy_engine(ctx, remote, src, len)?;
        } else if len > 0 {
            // The source is any memory of ours: an operand with no stride.
            p.src = Operand {
                base: src as u64,
                stride: 0,
                offset: 0,
                bytes: len as u64,
            };
            p.dst = Operand::of(dst);
            p.bytes = len as u64;
            p.peer = peer as u32;
            p.mode = COPY_PUT;
            self.launch(|k| k.copy, grid::copy_blocks(len), THREADS, ctx.stream, &p)?;
        }
        // The pad signal kernel, not the ops handshake: the handshake never signals
        // its own rank, and a rank may put_signal itself. Stream order puts it after
        // the copy; its system-scope release publishes the copy with the signal.
        self.signals.signal(
            &ctx.pads,
            PadSignal::Put(peer),
            SignalAt::new(0, ctx.timeout, ctx.stream),
        )
    }
}

fn check_peer(ctx: &OpContext, peer: usize) -> Result<()> {
    if peer < ctx.world {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "peer {peer} out of range for world size {}",
        ctx.world
    )))
}

fn check_word(addr: usize) -> Result<()> {
    if addr % 8 == 0 {
        return Ok(());
    }
    Err(Error::invalid("a signal word must be 8-byte aligned"))
}
