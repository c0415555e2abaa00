//! Tile reduce: every rank's strided tile summed into each root's.

use super::*;

/// Tile reduce: rank `roots[i]` gets the reduction over all ranks of `ins[i]` in its
/// `out` (torch's `tile_reduce` for one root, `multi_root_tile_reduce` for several).
pub fn tile_reduce<R: Copy + Into<Rank>>(
    ins: &[Operand],
    roots: &[R],
    out: Operand,
    tile: Tile,
    op: ReduceOp,
    opts: &OpOptions,
) -> Result<()> {
    let w = out.window;
    let name = if ins.len() > 1 {
        "multi_root_tile_reduce"
    } else {
        "tile_reduce"
    };
    let check = || {
        if ins.len() != roots.len() || ins.is_empty() {
            return Err(Error::invalid(format!(
                "{} tiles but {} roots (one root per tile, at least one)",
                ins.len(),
                roots.len()
            )));
        }
        let mut seen = vec![false; w.world()];
        let mut checked = Vec::with_capacity(roots.len());
        for &root in roots {
            let r = root.into().in_group(w.world(), "root")?;
            if std::mem::replace(&mut seen[r], true) {
                return Err(Error::invalid(format!(
                    "rank {r} is the root of more than one tile"
                )));
            }
            checked.push(r);
        }
        check_tile(&tile)?;
        let extent = tile.extent_bytes().unwrap_or(usize::MAX);
        let bufs = ins
            .iter()
            .enumerate()
            .map(|(i, op)| {
                same_group(w, op.window, "in_tile")?;
                tile_buf(op, extent, &format!("in_tiles[{i}]"))
            })
            .collect::<Result<Vec<_>>>()?;
        let o = tile_buf(&out, extent, "out_tile")?;
        for (i, b) in bufs.iter().enumerate() {
            refuse_overlap(name, ("out_tile", &o), (&format!("in_tiles[{i}]"), b))?;
        }
        Ok((bufs, o, checked))
    };
    let (bufs, o, roots) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::TileReduce(TileReduce {
        ins: &bufs,
        roots: &roots,
        out: &o,
        tile: &tile,
        op,
    });
    let elems = Elements {
        dtype: out.dtype,
        size: tile.elem.size(),
    };
    // SAFETY: every tile was checked to lie in its live window with the tile's extent.
    unsafe { execute_elems(w, Reach::Everyone, opts, &op, elems) }
}

fn check_tile(tile: &Tile) -> Result<()> {
    if tile.row_stride < tile.cols && tile.rows > 1 {
        return Err(Error::invalid(format!(
            "tile rows overlap: row stride {} < {} columns",
            tile.row_stride, tile.cols
        )));
    }
    if tile.extent_bytes().is_none() {
        return Err(Error::invalid("tile extent overflows"));
    }
    Ok(())
}

fn tile_buf(op: &Operand, extent: usize, what: &str) -> Result<SymmBuf> {
    if op.len < extent {
        return Err(Error::invalid(format!(
            "{what}: {} bytes hold less than the tile's {extent}",
            op.len
        )));
    }
    op.symm(what)
}
