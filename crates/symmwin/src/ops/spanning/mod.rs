//! Collective ops on a group that spans hosts: ranks mapped here are served through
//! the window (copies), every other rank through the group's own process-group
//! backend ([`RemotePeers::transfer`]), in the same call and overlapped.
//!
//! Every op runs as entry barrier, moves, exit barrier, the barriers among the ranks
//! of this host only (pads). A rank writes only its own outputs: it pulls from mapped
//! peers and receives from the others, and sends its inputs to the ranks of other
//! hosts. After the entry barrier every local input is ready; the exit barrier keeps
//! each input unchanged until its last local reader is done. The messages need no
//! barrier: a receive completes only once its sender is in the op, a send only once
//! its bytes have left, and the messages of a pair keep their order from op to op.
//!
//! The sizes of every message must be known on the host: split tables are read to the
//! host (device memory: a few small copies and a wait for the stream), exchanged with
//! the ranks of other hosts, and every rank plans each transfer it takes part in from
//! the same tables. So every send has its receive, and a split that does not fit is
//! skipped by both sides: no rank waits for a message that is never sent. On device
//! memory this path waits for the stream and cannot be captured in a CUDA graph;
//! groups whose ranks are all mapped keep the device-side path ([`super::DeviceOps`]
//! of the provider).

mod moves;
mod reduce;
mod var;

use crate::signal::remote::{RemotePeers, SignalScope};
use symmwin_device::error::Result;
use symmwin_device::provider::{Provider, ProviderKind};

use moves::Moves;
use symmwin_device::provider::device_ops::{DeviceOps, OpContext, OpRequest, SignalWait, SymmBuf};
use symmwin_host::{mismatch_error, Published};

/// [`DeviceOps`] for the windows of a group that spans hosts. The collectives move
/// data as the module describes; the one-sided ops reach only mapped peers (the safe
/// layer refuses the others) and are the provider's own.
pub(crate) struct SpanningOps<'a> {
    provider: &'a dyn Provider,
    scope: SignalScope<'a>,
    remote: &'a dyn RemotePeers,
}

impl<'a> SpanningOps<'a> {
    /// The ops over `scope`; fails when the group has no process-group backend.
    pub(crate) fn new(provider: &'a dyn Provider, scope: SignalScope<'a>) -> Result<Self> {
        let first_remote = scope.mapped.iter().position(|&m| !m).unwrap_or(0);
        let remote = scope.remote_for(first_remote)?;
        Ok(SpanningOps {
            provider,
            scope,
            remote,
        })
    }

    fn mapped(&self, rank: usize) -> bool {
        self.scope.mapped.get(rank).copied().unwrap_or(false)
    }

    /// Ranks not mapped here (on other hosts), in rank order.
    fn remote_ranks(&self) -> Vec<usize> {
        (0..self.scope.mapped.len())
            .filter(|&r| !self.mapped(r))
            .collect()
    }

    /// Barrier among this host's ranks: their inputs are ready (entry) or no longer
    /// read (exit). The ranks of other hosts need none: a receive completes only once
    /// its sender has entered the op, and a send only once its bytes have left.
    fn local_barrier(&self, ctx: &OpContext) -> Result<()> {
        self.scope.mapped_barrier(ctx.signal_at())
    }

    /// Entry barrier, `body`, exit barrier, among this host's ranks; the body's error
    /// is reported after the exit barrier (a barrier failure wins: the host's ranks
    /// are then out of step).
    ///
    /// On host memory this host's ranks compare their operand fingerprints through
    /// the pads (as `symmwin_host::HostOps` does); a rank that sees another fails,
    /// naming it, after the body, which still runs: its messages to other hosts must
    /// be matched there, so a rank cannot drop out of an op alone.
    fn collective(
        &self,
        ctx: &OpContext,
        op: &OpRequest,
        body: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let published = match self.provider.info().kind {
            ProviderKind::Host => Some(Published::new(ctx, self.mapped_ranks())?),
            _ => None,
        };
        self.local_barrier(ctx)?;
        // Device memory: once the barrier has completed on the stream every local
        // peer's inputs are ready; the copies below do not run on the caller's stream.
        self.provider.signals().synchronize(ctx.stream)?;
        let seen = published.as_ref().and_then(|p| p.disagreement());
        let outcome = body();
        self.local_barrier(ctx)?;
        drop(published);
        match seen {
            Some(seen) => Err(mismatch_error(op, ctx, &seen)),
            None => outcome,
        }
    }

    /// Ranks mapped here (this host's), in rank order.
    fn mapped_ranks(&self) -> impl Iterator<Item = usize> + Clone + '_ {
        (0..self.scope.mapped.len()).filter(|&r| self.mapped(r))
    }
}

impl SpanningOps<'_> {
    /// Body of `all_to_all`: pull each mapped peer's block, exchange the others'.
    fn all_to_all(
        &self,
        ctx: &OpContext,
        input: &SymmBuf,
        out: &SymmBuf,
        chunk: usize,
    ) -> Result<()> {
        let me = ctx.rank;
        let mut moves = Moves::default();
        for peer in 0..ctx.world {
            let into = out.range(me, peer * chunk, chunk)?;
            if self.mapped(peer) {
                let from = input
                    .range(peer, me * chunk, chunk)
                    .map_err(|e| e.with_peer(peer))?;
                moves.copy(into, from, chunk);
            } else {
                moves.recv(peer, into, chunk)?;
                moves.send(peer, input.range(me, peer * chunk, chunk)?, chunk)?;
            }
        }
        self.execute(ctx, &moves)
    }

    /// Body of `broadcast`: the root sends to the other hosts, this host pulls.
    fn broadcast(&self, ctx: &OpContext, buf: &SymmBuf, len: usize, root: usize) -> Result<()> {
        let mine = buf.range(ctx.rank, 0, len)?;
        let mut moves = Moves::default();
        if ctx.rank == root {
            for peer in self.remote_ranks() {
                moves.send(peer, mine, len)?;
            }
        } else if self.mapped(root) {
            let from = buf.range(root, 0, len).map_err(|e| e.with_peer(root))?;
            moves.copy(mine, from, len);
        } else {
            moves.recv(root, mine, len)?;
        }
        self.execute(ctx, &moves)
    }
}

impl DeviceOps for SpanningOps<'_> {
    fn check_errors(&self) -> Result<()> {
        self.provider.ops().check_errors()
    }

    unsafe fn execute(&self, ctx: &OpContext, op: &OpRequest) -> Result<()> {
        match *op {
            OpRequest::AllToAll { input, out, chunk } => {
                self.collective(ctx, op, || self.all_to_all(ctx, input, out, chunk))
            }
            OpRequest::AllToAllV { shape, args } => {
                self.collective(ctx, op, || self.all_to_all_v(ctx, shape, args))
            }
            OpRequest::Broadcast { buf, len, root } => {
                self.collective(ctx, op, || self.broadcast(ctx, buf, len, root))
            }
            OpRequest::TileReduce(r) => self.collective(ctx, op, || self.reduce_tiles(ctx, &r)),
            // One-sided: the safe layer lets them reach mapped peers only.
            // SAFETY: a propagation of the caller's assertion.
            _ => unsafe { self.provider.ops().execute(ctx, op) },
        }
    }

    unsafe fn wait_for_signal(&self, wait: &SignalWait) -> Result<()> {
        // SAFETY: a propagation of the caller's assertion.
        unsafe { self.provider.ops().wait_for_signal(wait) }
    }
}
