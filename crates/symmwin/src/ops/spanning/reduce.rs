//! Tile reduce across hosts: each root gathers every rank's tile (through the window
//! from mapped ranks, by message from the others) and reduces on the host in rank
//! order, accumulating in `f64` as the host provider does on one host.

use symmwin_device::error::Result;

use super::moves::{Moves, Scratch};
use super::SpanningOps;
use symmwin_device::provider::device_ops::elem;
use symmwin_device::provider::device_ops::{OpContext, ReduceOp, SymmBuf, Tile, TileReduce};

impl SpanningOps<'_> {
    /// Body of `tile_reduce` (inside the entry and exit barriers).
    pub(super) fn reduce_tiles(&self, ctx: &OpContext, r: &TileReduce) -> Result<()> {
        let ReduceOp::Sum = r.op;
        let me = ctx.rank;
        let extent = r.tile.extent_bytes().unwrap_or(0);
        let mine = r.root_index(me);
        let remote = self.remote_ranks();
        let mut moves = Moves::default();
        for (i, &root) in r.roots.iter().enumerate() {
            if !self.mapped(root) {
                moves.send(root, r.ins[i].range(me, 0, extent)?, extent)?;
            }
        }
        let received = match mine {
            Some(_) => remote.len() * extent,
            None => 0,
        };
        let mut scratch = Scratch::new(self.provider, received)?;
        if mine.is_some() {
            for (k, &peer) in remote.iter().enumerate() {
                moves.recv(peer, scratch.ptr(k * extent), extent)?;
            }
        }
        self.execute(ctx, &moves)?;
        let Some(t) = mine else {
            return Ok(());
        };
        let tiles = self.collect(ctx, &r.ins[t], extent, &remote, &mut scratch)?;
        self.write_sum(&tiles, r.out, me, r.tile)
    }

    /// Sum `tiles` (one per rank, each a tile's extent) row by row into `out`, writing
    /// only the tile's elements (never the gaps between its rows).
    fn write_sum(&self, tiles: &[Vec<u8>], out: &SymmBuf, me: usize, tile: &Tile) -> Result<()> {
        let rows = tile.row_layout();
        let mut acc = vec![0f64; tile.cols];
        let mut row = vec![0u8; rows.row_len()];
        for at in rows.iter() {
            acc.fill(0.0);
            for bytes in tiles {
                let base = bytes[at.clone()].as_ptr() as usize;
                // SAFETY: the row slice above holds `cols` elements.
                unsafe { elem::accumulate_row(tile.elem, &mut acc, base) };
            }
            // SAFETY: `row` holds `cols` elements.
            unsafe { elem::store_row(tile.elem, &acc, row.as_mut_ptr() as usize) };
            let dst = out.range(me, at.start, at.len())?;
            // SAFETY: the row lies in this rank's out tile, checked against its room.
            unsafe { self.provider.write(dst, &row)? };
        }
        Ok(())
    }
}
