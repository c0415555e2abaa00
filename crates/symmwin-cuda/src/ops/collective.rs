//! The collective ops: all_to_all (SM push or copy engine), the all_to_all_vdev family
//! (one kernel that plans and pulls), broadcast (SM pull or copy engine) and tile
//! reduce.

use super::grid::{self, COPY_ENGINE_MIN_COLLECTIVE};
use super::params::{
    OpId, Operand, OpsParams, A2AV_1D, A2AV_2D, A2AV_2D_OFFSET, DTYPE_BF16, DTYPE_F16, DTYPE_F32,
    DTYPE_F64, HS_ANSWER_NEXT, HS_SIGNAL_ALL, HS_SIGNAL_PEER, HS_WAIT_ALL, HS_WAIT_PEER,
    MAX_EXPERTS, MAX_ROOT_WORLD, MAX_SPLITS, THREADS,
};
use super::{CudaOps, Pick};
use symmwin_device::error::{Error, Result};
use symmwin_device::provider::device_ops::plan::Shape;
use symmwin_device::provider::device_ops::{
    ElemType, OpContext, ReduceOp, SymmBuf, TileReduce, VarArgs,
};

impl CudaOps {
    pub(super) fn equal_all_to_all(
        &self,
        ctx: &OpContext,
        input: &SymmBuf,
        out: &SymmBuf,
        bytes: usize,
    ) -> Result<()> {
        // Everything the kernel touches: our world chunks, and chunk `rank` of every
        // peer's out (the same room on every rank).
        bytes
            .checked_mul(ctx.world)
            .filter(|&total| total <= input.len)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "input holds fewer than {} chunks of {bytes} bytes",
                    ctx.world
                ))
            })?;
        out.range(ctx.rank, ctx.rank * bytes, bytes)?;
        let mut p = self.base_params(ctx, OpId::AllToAll)?;
        p.src = Operand::of(input);
        p.dst = Operand::of(out);
        p.bytes = bytes as u64;
        if ctx.world > 1 && grid::use_copy_engine(ctx.engine, bytes, COPY_ENGINE_MIN_COLLECTIVE) {
            return self.all_to_all_copy_engine(ctx, input, out, bytes, &p);
        }
        let bpp = grid::push_blocks_per_peer(ctx, bytes);
        self.launch_synchronized(|k| k.all_to_all, ctx, &mut p, bpp, ctx.world * bpp)
    }

    /// Ready handshake with every peer, one peer copy per chunk, data handshake.
    fn all_to_all_copy_engine(
        &self,
        ctx: &OpContext,
        input: &SymmBuf,
        out: &SymmBuf,
        bytes: usize,
        base: &OpsParams,
    ) -> Result<()> {
        let ch = grid::first_channel(ctx, 2)?;
        let everyone = HS_SIGNAL_ALL | HS_WAIT_ALL;
        self.handshake(ctx, base, everyone, 0, ch)?;
        for step in 1..=ctx.world {
            let peer = (ctx.rank + step) % ctx.world;
            let dst = out.range(peer, ctx.rank * bytes, bytes)?;
            let src = input.range(ctx.rank, peer * bytes, bytes)?;
            self.copy_engine(ctx, dst, src, bytes)?;
        }
        self.handshake(ctx, base, everyone, 0, ch + 1)
    }

    pub(super) fn vdev(&self, ctx: &OpContext, args: &VarArgs, shape: Shape) -> Result<()> {
        let world = ctx.world;
        let experts = args.experts_per_rank;
        let (op, mode, align, in_table) = match shape {
            Shape::Flat => (OpId::AllToAllVdev, A2AV_1D, 0, world),
            Shape::Dispatch { major_align } => {
                (OpId::AllToAllVdev2d, A2AV_2D, major_align, world * experts)
            }
            Shape::Combine => (
                OpId::AllToAllVdev2dOffset,
                A2AV_2D_OFFSET,
                0,
                2 * world * experts,
            ),
        };
        check_var_geometry(args, world, shape, in_table)?;
        check_thread_per_peer(ctx, "all_to_all_vdev")?;
        let row_bytes = args.rows.row_bytes;
        let mut p = self.base_params(ctx, op)?;
        p.src = Operand {
            bytes: (args.rows.in_rows * row_bytes) as u64,
            ..Operand::of(&args.input)
        };
        p.dst = Operand {
            bytes: (args.rows.out_rows * row_bytes) as u64,
            ..Operand::of(&args.out)
        };
        p.src_splits = Operand::of(&args.in_splits);
        p.dst_splits = Operand::of(&args.out_splits_offsets);
        p.row_bytes = row_bytes as u64;
        p.experts = experts as u32;
        p.major_align =
            i64::try_from(align).map_err(|_| Error::invalid("major_align exceeds i64"))?;
        p.mode = mode;
        let bpp = grid::pull_blocks_per_peer(ctx);
        p.blocks_per_peer = bpp as u32;
        p.channel = grid::first_channel(ctx, grid::VDEV_SHARED_CHANNELS + bpp)?;
        self.launch(|k| k.a2av, world * bpp, THREADS, ctx.stream, &p)
    }

    pub(super) fn broadcast_from(
        &self,
        ctx: &OpContext,
        buf: &SymmBuf,
        len: usize,
        root: usize,
    ) -> Result<()> {
        if root >= ctx.world {
            return Err(Error::invalid(format!(
                "root {root} out of range for world size {}",
                ctx.world
            )));
        }
        let src = buf.range(root, 0, len)?;
        let dst = buf.range(ctx.rank, 0, len.min(buf.len))?;
        if len > buf.len {
            return Err(Error::invalid(format!(
                "broadcast of {len} bytes into a {}-byte operand",
                buf.len
            )));
        }
        let mut p = self.base_params(ctx, OpId::Broadcast)?;
        p.src = Operand::of(buf);
        p.dst = Operand::of(buf);
        p.bytes = len as u64;
        p.peer = root as u32;
        if ctx.world == 1 {
            return Ok(());
        }
        if grid::use_copy_engine(ctx.engine, len, COPY_ENGINE_MIN_COLLECTIVE) {
            let ch = grid::first_channel(ctx, 2)?;
            if ctx.rank == root {
                self.handshake(ctx, &p, HS_SIGNAL_ALL, 0, ch)?;
                return self.handshake(ctx, &p, HS_WAIT_ALL, 0, ch + 1);
            }
            // The root waits on ch + 1 next: a mismatch answers there (it fails too).
            self.handshake(ctx, &p, HS_WAIT_PEER | HS_ANSWER_NEXT, root, ch)?;
            self.copy_engine(ctx, dst, src, len)?;
            return self.handshake(ctx, &p, HS_SIGNAL_PEER, root, ch + 1);
        }
        check_thread_per_peer(ctx, "broadcast")?;
        let blocks = grid::broadcast_blocks(ctx, len);
        self.launch_synchronized(|k| k.broadcast, ctx, &mut p, blocks, blocks)
    }

    pub(super) fn reduce_tiles(&self, ctx: &OpContext, r: &TileReduce) -> Result<()> {
        let ReduceOp::Sum = r.op;
        if r.ins.len() != r.roots.len() {
            return Err(Error::invalid(format!(
                "{} tiles but {} roots",
                r.ins.len(),
                r.roots.len()
            )));
        }
        if ctx.world > MAX_ROOT_WORLD {
            return Err(Error::invalid(format!(
                "tile reduce supports world sizes up to {MAX_ROOT_WORLD}, got {}",
                ctx.world
            )));
        }
        let extent = r
            .tile
            .extent_bytes()
            .ok_or_else(|| Error::invalid("tile extent overflows"))?;
        let op = if r.ins.len() == 1 {
            OpId::TileReduce
        } else {
            OpId::MultiRootTileReduce
        };
        let mut p = self.base_params(ctx, op)?;
        let mut mine = None;
        for (i, (&root, input)) in r.roots.iter().zip(r.ins).enumerate() {
            if root >= ctx.world || (p.roots[root / 64] >> (root % 64)) & 1 == 1 {
                return Err(Error::invalid(format!(
                    "root {root} is out of range or named twice"
                )));
            }
            p.add_root(root)?;
            input.range(ctx.rank, 0, extent)?;
            if root == ctx.rank {
                mine = Some(i);
            }
        }
        if r.ins.is_empty() || ctx.world == 1 && mine.is_none() {
            return Ok(());
        }
        if extent > r.out.len {
            return Err(Error::invalid(format!(
                "a {extent}-byte tile does not fit a {}-byte out tile",
                r.out.len
            )));
        }
        check_thread_per_peer(ctx, "tile_reduce")?;
        let elem = r.tile.elem.size();
        p.src = Operand::of(&r.ins[mine.unwrap_or(0)]);
        p.dst = Operand::of(r.out);
        p.row_bytes = (r.tile.row_stride * elem) as u64;
        p.bytes = (r.tile.cols * elem) as u64;
        p.rows = r.tile.rows as u64;
        p.mode = dtype_code(r.tile.elem);
        let blocks = grid::tile_blocks(ctx, r.tile.rows * r.tile.cols * elem, r.tile.rows);
        self.launch_synchronized(|k| k.tile_reduce, ctx, &mut p, blocks, blocks)
    }

    /// Launches `pick` on `grid` blocks of [`THREADS`], `blocks_per_peer` of them
    /// working for each peer, each block with the two pad channels (entry and exit)
    /// it synchronizes on.
    fn launch_synchronized(
        &self,
        pick: Pick,
        ctx: &OpContext,
        p: &mut OpsParams,
        blocks_per_peer: usize,
        grid: usize,
    ) -> Result<()> {
        p.blocks_per_peer = blocks_per_peer as u32;
        p.channel = grid::first_channel(ctx, 2 * blocks_per_peer)?;
        self.launch(pick, grid, THREADS, ctx.stream, p)
    }

    /// One block that signals and/or waits for `peer` or every other rank on `channel`.
    pub(super) fn handshake(
        &self,
        ctx: &OpContext,
        base: &OpsParams,
        mode: u32,
        peer: usize,
        channel: u32,
    ) -> Result<()> {
        let mut p = *base;
        p.mode = mode;
        p.peer = peer as u32;
        p.channel = channel;
        self.launch(
            |k| k.handshake,
            1,
            grid::peer_threads(ctx.world),
            ctx.stream,
            &p,
        )
    }
}

/// Kernels that give every peer one thread of a block need `world <= THREADS`.
fn check_thread_per_peer(ctx: &OpContext, op: &str) -> Result<()> {
    if ctx.world <= THREADS as usize {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{op} on CUDA supports world sizes up to {THREADS}, got {}",
        ctx.world
    )))
}

fn dtype_code(elem: ElemType) -> u32 {
    match elem {
        ElemType::F32 => DTYPE_F32,
        ElemType::F64 => DTYPE_F64,
        ElemType::F16 => DTYPE_F16,
        ElemType::BF16 => DTYPE_BF16,
    }
}

/// What the kernels assume about the all_to_all_vdev operands, checked on the host:
/// shared-memory limits, a non-empty row, tables that every peer can read in full.
fn check_var_geometry(args: &VarArgs, world: usize, shape: Shape, in_table: usize) -> Result<()> {
    let experts = args.experts_per_rank;
    if experts == 0 || experts > MAX_EXPERTS || world * experts > MAX_SPLITS {
        return Err(Error::invalid(format!(
            "{experts} experts per rank at world size {world}: the CUDA kernels support \
             1..={MAX_EXPERTS} experts per rank and at most {MAX_SPLITS} splits in all"
        )));
    }
    if shape == Shape::Flat && experts != 1 {
        return Err(Error::invalid("all_to_all_vdev has one split per rank"));
    }
    // major_align and the tables' lengths were checked with the arguments (ops::collective).
    let rows = &args.rows;
    if rows.row_bytes == 0 {
        return Err(Error::invalid(
            "rows of zero bytes: input and out must have a non-empty row",
        ));
    }
    let bytes = |n: usize| n.checked_mul(rows.row_bytes);
    if bytes(rows.in_rows).is_none_or(|b| b > args.input.len)
        || bytes(rows.out_rows).is_none_or(|b| b > args.out.len)
    {
        return Err(Error::invalid("rows reach past the input or out operand"));
    }
    let table = |n: usize| n * std::mem::size_of::<i64>();
    // Every peer reads this rank's table in full: its room, not only its length.
    if args.in_splits.room < table(in_table) {
        return Err(Error::invalid(
            "the input split table is shorter than the op reads",
        ));
    }
    Ok(())
}
