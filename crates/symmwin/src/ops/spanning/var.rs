//! The all-to-all-v family across hosts: every rank learns every split table (through
//! the window from mapped ranks, by message from the others) and plans from them.

use symmwin_device::error::Result;

use super::moves::{i64s, Moves, Scratch};
use super::SpanningOps;
use symmwin_device::provider::device_ops::plan::{in_table_len, Chunk, Plan, Planner, Shape};
use symmwin_device::provider::device_ops::{OpContext, VarArgs};
use symmwin_host::check_own_sends;

const I64: usize = std::mem::size_of::<i64>();

/// Where one chunk of a plan may go: both ends are decided from the tables and the
/// operands' room, which every rank knows alike.
fn chunk_ranges(args: &VarArgs, me: usize, c: &Chunk) -> Result<(usize, usize, usize)> {
    let row = args.rows.row_bytes;
    let bytes = c.rows * row;
    let src = args
        .input
        .range(c.src, c.src_row * row, bytes)
        .map_err(|e| e.with_peer(c.src))?;
    let dst = args.out.range(me, c.out_row * row, bytes)?;
    Ok((dst, src, bytes))
}

impl SpanningOps<'_> {
    /// Body of the family's ops (inside the entry and exit barriers).
    pub(super) fn all_to_all_v(&self, ctx: &OpContext, shape: Shape, args: &VarArgs) -> Result<()> {
        let experts = args.experts_per_rank;
        let tables = self.gather_tables(ctx, in_table_len(shape, ctx.world, experts), args)?;
        // Negative splits are in the tables every rank holds: all ranks fail alike here,
        // before any message, so none waits for one.
        let planner = Planner::new(shape, &tables, experts)?;
        let mine = planner.plan(ctx.rank)?;
        let own_sends = check_own_sends(shape, &tables[ctx.rank], args);
        let mut moves = Moves::default();
        let mut discard = None;
        let received = self.receive_plan(args, &mine, &mut moves, &mut discard);
        for peer in self.remote_ranks() {
            let theirs = planner.plan(peer)?;
            self.send_plan(args, ctx.rank, peer, &theirs, &mut moves)?;
        }
        self.execute(ctx, &moves)?;
        own_sends?;
        received?;
        let table = [mine.out_splits, mine.out_offsets].concat();
        let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let dst = args.out_splits_offsets.range(ctx.rank, 0, bytes.len())?;
        // SAFETY: the range was checked against this rank's out_splits_offsets.
        unsafe { self.provider.write(dst, &bytes) }
    }

    /// Every rank's input split table (`n` values each), in rank order.
    fn gather_tables(&self, ctx: &OpContext, n: usize, args: &VarArgs) -> Result<Vec<Vec<i64>>> {
        let bytes = n * I64;
        let remote = self.remote_ranks();
        let mut scratch = Scratch::new(self.provider, bytes * remote.len())?;
        let own = args.in_splits.range(ctx.rank, 0, bytes)?;
        let mut moves = Moves::default();
        for (i, &peer) in remote.iter().enumerate() {
            moves.send(peer, own, bytes)?;
            moves.recv(peer, scratch.ptr(i * bytes), bytes)?;
        }
        self.execute(ctx, &moves)?;
        let raw = self.collect(ctx, &args.in_splits, bytes, &remote, &mut scratch)?;
        Ok(raw.iter().map(|table| i64s(table)).collect())
    }

    /// This rank's side of its own plan: pull from mapped senders, receive from the
    /// others. A chunk beyond the room is skipped by both sides; one beyond this rank's
    /// out rows (which only it knows) is received into scratch and dropped. The first
    /// such chunk is the error returned.
    fn receive_plan(
        &self,
        args: &VarArgs,
        mine: &Plan,
        moves: &mut Moves,
        discard: &mut Option<Scratch>,
    ) -> Result<()> {
        let me = self.scope.pads.rank();
        let mut first_error = Ok(());
        for c in &mine.chunks {
            let fits = c.out_row.saturating_add(c.rows) <= args.rows.out_rows;
            match chunk_ranges(args, me, c) {
                Err(e) => first_error = first_error.and(Err(e)),
                Ok((dst, src, bytes)) if fits => {
                    if self.mapped(c.src) {
                        moves.copy(dst, src, bytes);
                    } else {
                        moves.recv(c.src, dst, bytes)?;
                    }
                }
                Ok((_, _, bytes)) => {
                    if !self.mapped(c.src) {
                        let scratch = match discard {
                            Some(s) => s,
                            None => discard.insert(Scratch::new(self.provider, args.out.room)?),
                        };
                        moves.recv(c.src, scratch.ptr(0), bytes)?;
                    }
                    first_error = first_error.and(Err(c.overruns_out(args.rows.out_rows)));
                }
            }
        }
        first_error
    }

    /// This rank's sends in `peer`'s plan, in that plan's order (the order `peer`
    /// receives them in). Chunks beyond the room are skipped, as `peer` skips them.
    fn send_plan(
        &self,
        args: &VarArgs,
        me: usize,
        peer: usize,
        theirs: &Plan,
        moves: &mut Moves,
    ) -> Result<()> {
        for c in theirs.chunks.iter().filter(|c| c.src == me) {
            if let Ok((_, src, bytes)) = chunk_ranges(args, me, c) {
                moves.send(peer, src, bytes)?;
            }
        }
        Ok(())
    }
}
