//! The ops on host memory: CPU copies between mapped slots, synchronized with the
//! host signal pads ([`HostSignals`]). Every op is complete when it returns.
//!
//! Collective ops run as entry barrier, pull, exit barrier: after the entry barrier
//! every peer's inputs and split tables are ready; each rank copies what it receives
//! into its own outputs (so it alone writes them); the exit barrier keeps every input
//! unchanged until the last reader is done. A rank whose plan is invalid moves
//! nothing but still takes both barriers, so the pads stay balanced and no peer hangs;
//! it reports the error after the exit barrier.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use symmwin_device::error::{Error, Result};
use symmwin_device::provider::device_ops::elem;
use symmwin_device::provider::device_ops::plan::{in_table_len, plan, Plan, Shape};
use symmwin_device::provider::device_ops::{
    DeviceOps, OpContext, OpRequest, ReduceOp, SignalWait, SymmBuf, Tile, VarArgs,
};
use symmwin_device::provider::{PadSignal, SignalAt, Signals};

use super::signals::{timed_out, wait_until, HostSignals, HostWait};
use symmwin_device::provider::device_ops::fingerprint::{self, Disagreement};

/// [`DeviceOps`] for the host provider.
#[derive(Debug, Default)]
pub struct HostOps {
    signals: HostSignals,
}

const I64: usize = std::mem::size_of::<i64>();

impl HostOps {
    fn barrier(&self, ctx: &OpContext) -> Result<()> {
        self.signals
            .signal(&ctx.pads, PadSignal::Barrier, ctx.signal_at())
    }

    /// Entry barrier, `body`, exit barrier; the body's error is reported after the
    /// exit barrier (a barrier failure wins: the group is then out of step). The
    /// ranks' fingerprints are compared after the entry barrier; on a disagreement no
    /// rank runs `body` and every rank reports the ranks that differ from it.
    fn collective(
        &self,
        ctx: &OpContext,
        op: &OpRequest,
        body: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let published = Published::new(ctx, 0..ctx.world)?;
        self.barrier(ctx)?;
        let outcome = match published.disagreement() {
            None => body(),
            Some(seen) => Err(mismatch_error(op, ctx, &seen)),
        };
        self.barrier(ctx)?;
        drop(published);
        outcome
    }
}

/// This rank's operand fingerprint, published in its own pad at the word of
/// (ops channel, own rank), which no signal uses (a rank never signals itself), for
/// the ranks in `peers` to read between an op's entry and exit barriers. Cleared
/// when dropped, after the exit barrier (every peer has read it by then, and pads
/// are zero at rest again), or at once when a barrier fails.
pub struct Published<'a, P: Iterator<Item = usize> + Clone> {
    ctx: &'a OpContext,
    peers: P,
}

impl<'a, P: Iterator<Item = usize> + Clone> Published<'a, P> {
    /// Publish `ctx`'s fingerprint word; the entry barrier's release makes it visible.
    pub fn new(ctx: &'a OpContext, peers: P) -> Result<Self> {
        fingerprint_word(ctx, ctx.rank)?.store(ctx.fingerprint.word(), Ordering::Relaxed);
        Ok(Published { ctx, peers })
    }

    /// The peers whose published word differs from this rank's (read after the entry
    /// barrier's acquire), if any.
    pub fn disagreement(&self) -> Option<Disagreement> {
        let mine = self.ctx.fingerprint.word();
        let differ: Vec<(usize, u32)> = self
            .peers
            .clone()
            .filter(|&peer| peer != self.ctx.rank)
            .filter_map(|peer| {
                let word = fingerprint_word(self.ctx, peer)
                    .ok()?
                    .load(Ordering::Relaxed);
                (word != mine).then_some((peer, word))
            })
            .collect();
        (!differ.is_empty()).then_some(Disagreement { differ })
    }
}

impl<P: Iterator<Item = usize> + Clone> Drop for Published<'_, P> {
    fn drop(&mut self) {
        if let Ok(word) = fingerprint_word(self.ctx, self.ctx.rank) {
            word.store(0, Ordering::Relaxed);
        }
    }
}

/// The fingerprint word of `owner` (its own word, (ops channel, `owner`), in its pad).
fn fingerprint_word(ctx: &OpContext, owner: usize) -> Result<&AtomicU32> {
    let addr = ctx.pads.word(owner, ctx.channel, owner)?;
    // SAFETY: the address lies inside a mapped host pad (bounds checked by `word`)
    // that lives as long as the window of the op, which outlives the op and so the
    // borrow of `ctx`; u32 words are 4-byte aligned; pads are accessed atomically.
    Ok(unsafe { AtomicU32::from_ptr(addr as *mut u32) })
}

/// The error of a disagreement seen by this rank.
pub fn mismatch_error(op: &OpRequest, ctx: &OpContext, seen: &Disagreement) -> Error {
    fingerprint::mismatch_error(op, ctx.fingerprint, ctx.engine, ctx.rank, seen)
}

/// Copy `len` bytes; `ptr::copy` because a rank may copy its own slot onto itself.
///
/// # Safety
/// Both ranges are mapped and live (checked by the caller through [`SymmBuf::range`]).
unsafe fn copy(dst: usize, src: usize, len: usize) {
    // SAFETY: a propagation of the caller's assertion.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
}

fn read_i64s(buf: &SymmBuf, rank: usize, count: usize) -> Result<Vec<i64>> {
    let src = buf.range(rank, 0, count * I64)?;
    let mut values = vec![0i64; count];
    // SAFETY: `range` checked the table lies inside `rank`'s mapped slot.
    unsafe {
        std::ptr::copy_nonoverlapping(src as *const u8, values.as_mut_ptr().cast(), count * I64)
    };
    Ok(values)
}

fn write_i64s(buf: &SymmBuf, rank: usize, values: &[i64]) -> Result<()> {
    let dst = buf.range(rank, 0, std::mem::size_of_val(values))?;
    // SAFETY: `range` checked the destination lies inside this rank's mapped slot.
    unsafe {
        std::ptr::copy_nonoverlapping(
            values.as_ptr().cast::<u8>(),
            dst as *mut u8,
            std::mem::size_of_val(values),
        )
    };
    Ok(())
}

/// This rank's own input table must stay inside its input rows (torch asserts it on
/// the device; here it is an error after the op).
pub fn check_own_sends(shape: Shape, table: &[i64], args: &VarArgs) -> Result<()> {
    let n = match shape {
        Shape::Combine => table.len() / 2,
        _ => table.len(),
    };
    let need = match shape {
        Shape::Combine => (0..n)
            .map(|i| table[i].max(0) as u128 + table[n + i].max(0) as u128)
            .max()
            .unwrap_or(0),
        _ => table.iter().map(|&v| v.max(0) as u128).sum(),
    };
    if need > args.rows.in_rows as u128 {
        return Err(Error::invalid(format!(
            "in_splits ask for {need} rows but input has {} rows",
            args.rows.in_rows
        )));
    }
    Ok(())
}

/// The first chunk that does not fit this rank's out, as an error naming its sender.
fn check_room(plan: &Plan, args: &VarArgs) -> Result<()> {
    for c in &plan.chunks {
        if c.out_row.saturating_add(c.rows) > args.rows.out_rows {
            return Err(c.overruns_out(args.rows.out_rows));
        }
    }
    Ok(())
}

fn run_plan(shape: Shape, ctx: &OpContext, args: &VarArgs) -> Result<()> {
    let experts = args.experts_per_rank;
    let n = in_table_len(shape, ctx.world, experts);
    let tables = (0..ctx.world)
        .map(|s| read_i64s(&args.in_splits, s, n).map_err(|e| e.with_peer(s)))
        .collect::<Result<Vec<_>>>()?;
    check_own_sends(shape, &tables[ctx.rank], args)?;
    let plan = plan(shape, &tables, ctx.rank, experts)?;
    check_room(&plan, args)?;
    let row = args.rows.row_bytes;
    // Resolve every address before moving a byte, so a bad split moves nothing.
    let moves = plan
        .chunks
        .iter()
        .map(|c| {
            let bytes = c.rows * row;
            let src = args
                .input
                .range(c.src, c.src_row * row, bytes)
                .map_err(|e| e.with_peer(c.src))?;
            Ok((
                args.out.range(ctx.rank, c.out_row * row, bytes)?,
                src,
                bytes,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    for (dst, src, bytes) in moves {
        // SAFETY: both ranges were checked against their operands' room above.
        unsafe { copy(dst, src, bytes) };
    }
    write_i64s(
        &args.out_splits_offsets,
        ctx.rank,
        &[plan.out_splits, plan.out_offsets].concat(),
    )
}

/// The 64-bit signal word of `rank`'s `sig` (often in a signal pad), borrowed no
/// longer than `sig`, that is, one op.
fn signal_word(sig: &SymmBuf, rank: usize) -> Result<&AtomicU64> {
    let addr = sig.range(rank, 0, 8)?;
    if addr % 8 != 0 {
        return Err(Error::invalid("sigpad is not 8-byte aligned"));
    }
    // SAFETY: 8 bytes at an 8-byte aligned address inside a mapped slot (checked
    // above) that outlives the op, and so the borrow of `sig`; every access to signal
    // words is atomic.
    Ok(unsafe { AtomicU64::from_ptr(addr as *mut u64) })
}

impl DeviceOps for HostOps {
    unsafe fn execute(&self, ctx: &OpContext, op: &OpRequest) -> Result<()> {
        match *op {
            OpRequest::AllToAll { input, out, chunk } => {
                // SAFETY: a propagation of the caller's assertion.
                self.collective(ctx, op, || unsafe { all_to_all(ctx, input, out, chunk) })
            }
            OpRequest::AllToAllV { shape, args } => {
                self.collective(ctx, op, || run_plan(shape, ctx, args))
            }
            OpRequest::Broadcast { buf, len, root } => {
                // SAFETY: a propagation of the caller's assertion.
                self.collective(ctx, op, || unsafe { broadcast(ctx, buf, len, root) })
            }
            // SAFETY: a propagation of the caller's assertion.
            OpRequest::Put(t) => unsafe { copy_between(ctx, t.buf, t.len, ctx.rank, t.peer) },
            // SAFETY: a propagation of the caller's assertion.
            OpRequest::Get(t) => unsafe { copy_between(ctx, t.buf, t.len, t.peer, ctx.rank) },
            OpRequest::PutWithSignal { put, sig, value } => {
                let word = signal_word(sig, put.peer).map_err(|e| e.with_peer(put.peer))?;
                // SAFETY: a propagation of the caller's assertion.
                unsafe { copy_between(ctx, put.buf, put.len, ctx.rank, put.peer)? };
                // Release: the data is visible to whoever acquires the signal.
                word.store(value, Ordering::Release);
                Ok(())
            }
            OpRequest::PutSignal {
                src,
                len,
                dst,
                peer,
            } => {
                let to = dst.range(peer, 0, len).map_err(|e| e.with_peer(peer))?;
                // SAFETY: `to` is a checked range of the live window; `src` is the
                // caller's assertion.
                unsafe { copy(to, src, len) };
                self.signals.signal(
                    &ctx.pads,
                    PadSignal::Put(peer),
                    SignalAt::new(0, ctx.timeout, ctx.stream).watching(ctx.peers),
                )
            }
            OpRequest::TileReduce(r) => self.collective(ctx, op, || {
                let Some(mine) = r.root_index(ctx.rank) else {
                    return Ok(());
                };
                reduce_tile(ctx, &r.ins[mine], r.out, r.tile, r.op)
            }),
        }
    }

    unsafe fn wait_for_signal(&self, wait: &SignalWait) -> Result<()> {
        // SAFETY: the caller guarantees an aligned, live u64 accessed only atomically.
        let word = unsafe { AtomicU64::from_ptr(wait.word as *mut u64) };
        let consumed = || {
            word.compare_exchange_weak(wait.value, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        let until = HostWait {
            deadline: Instant::now() + wait.timeout,
            peer: wait.peer,
            peers: wait.peers,
            waiter: (wait.rank, "wait_for_signal"),
            // The user's own word: the user's protocol, never the window's poison.
            mark: None,
        };
        if wait_until(until, consumed).map_err(|e| e.at_rank(wait.rank))? {
            Ok(())
        } else {
            Err(timed_out(wait.peer, wait.timeout).at_rank(wait.rank))
        }
    }
}

/// Every rank's block `rank` of `input` into this rank's `out`, in sender order.
///
/// # Safety
/// [`DeviceOps`]' contract for both operands.
unsafe fn all_to_all(
    ctx: &OpContext,
    input: &SymmBuf,
    out: &SymmBuf,
    bytes_per_peer: usize,
) -> Result<()> {
    for src in 0..ctx.world {
        let from = input
            .range(src, ctx.rank * bytes_per_peer, bytes_per_peer)
            .map_err(|e| e.with_peer(src))?;
        let to = out.range(ctx.rank, src * bytes_per_peer, bytes_per_peer)?;
        // SAFETY: both ranges checked against their operands' room.
        unsafe { copy(to, from, bytes_per_peer) };
    }
    Ok(())
}

/// `root`'s first `len` bytes of `buf` into this rank's.
///
/// # Safety
/// [`DeviceOps`]' contract for `buf`.
unsafe fn broadcast(ctx: &OpContext, buf: &SymmBuf, len: usize, root: usize) -> Result<()> {
    if ctx.rank == root {
        return Ok(());
    }
    // SAFETY: a propagation of the caller's assertion.
    unsafe { copy_between(ctx, buf, len, root, ctx.rank) }
}

/// The first `len` bytes of rank `from`'s `buf` into rank `to`'s (one of them this
/// rank; an error on the other's range names it as the peer).
///
/// # Safety
/// [`DeviceOps`]' contract for `buf`.
unsafe fn copy_between(
    ctx: &OpContext,
    buf: &SymmBuf,
    len: usize,
    from: usize,
    to: usize,
) -> Result<()> {
    let range = |rank: usize| {
        let at = buf.range(rank, 0, len);
        if rank == ctx.rank {
            at
        } else {
            at.map_err(|e| e.with_peer(rank))
        }
    };
    let src = range(from)?;
    let dst = range(to)?;
    // SAFETY: both ranges checked against the operand's room.
    unsafe { copy(dst, src, len) };
    Ok(())
}

/// Reduce every rank's `input` tile into this rank's `out`, row by row.
fn reduce_tile(
    ctx: &OpContext,
    input: &SymmBuf,
    out: &SymmBuf,
    tile: &Tile,
    op: ReduceOp,
) -> Result<()> {
    let ReduceOp::Sum = op;
    let mut acc = vec![0f64; tile.cols];
    for row in tile.row_layout().iter() {
        acc.fill(0.0);
        for src in 0..ctx.world {
            let from = input
                .range(src, row.start, row.len())
                .map_err(|e| e.with_peer(src))?;
            // SAFETY: the row lies in the checked range of `src`'s input.
            unsafe { elem::accumulate_row(tile.elem, &mut acc, from) };
        }
        let to = out.range(ctx.rank, row.start, row.len())?;
        // SAFETY: the row lies in the checked range of this rank's out.
        unsafe { elem::store_row(tile.elem, &acc, to) };
    }
    Ok(())
}
