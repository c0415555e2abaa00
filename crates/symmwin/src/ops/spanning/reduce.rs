//! Tile reduce across hosts: each root gathers every rank's tile (through the window
//! from mapped ranks, by message from the others) and reduces on the host in rank
//! order, accumulating in `f64` as the host provider does on one host.

use crate::error::Result;

use super::moves::{Moves, Scratch};
use super::SpanningOps;
use crate::provider::device_ops::elem;
use crate::provider::device_ops::{OpContext, ReduceOp, SymmBuf, Tile, TileReduce};

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
        let size = tile.elem.size();
        let row_len = tile.cols * size;
        let mut acc = vec![0f64; tile.cols];
        let mut row = vec![0u8; row_len];
        for r in 0..tile.rows {
            let at = r * tile.row_stride * size;
            acc.fill(0.0);
            for bytes in tiles {
                let base = bytes[at..at + row_len].as_ptr() as usize;
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: element i lies in the row slice above.
                    *a += unsafe { elem::load(tile.elem, base, i) };
                }
            }
            let base = row.as_mut_ptr() as usize;
            for (i, &a) in acc.iter().enumerate() {
                // SAFETY: element i lies in `row`, which holds `cols` elements.
                unsafe { elem::store(tile.elem, base, i, a) };
            }
            let dst = out.range(me, at, row_len)?;
            // SAFETY: the row lies in this rank's out tile, checked against its room.
            unsafe { self.provider.write(dst, &row)? };
        }
        Ok(())
    }
}
