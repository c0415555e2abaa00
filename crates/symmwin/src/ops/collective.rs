//! The safe API of the ops: operands are windows and byte offsets. Every range,
//! group and table length is checked here, once, before a provider sees an address.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Phase, Result};
use std::sync::Arc;

use crate::group::Group;
use crate::provider::{Provider, StreamHandle};
use crate::registry::Registry;
use crate::signal::{SignalOptions, Stream};
use crate::window::Window;

use super::args::{OpContext, ReduceOp, Rows, SignalWait, SymmBuf, Tile, VarArgs};
use super::fingerprint::Fingerprint;
use super::plan::{in_table_len, Shape};
use super::rank::Rank;
use super::request::{OpRequest, TileReduce, Transfer};
use super::spanning::SpanningOps;
use super::{ops_channel, Engine};

/// One operand: `len` bytes at byte `offset` of this rank's slot of `window` (and the
/// same offset in every peer's slot).
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a> {
    /// The window the operand lives in.
    pub window: &'a Window,
    /// Byte offset inside each rank's slot.
    pub offset: usize,
    /// Bytes of this rank's operand.
    pub len: usize,
    /// The operand lives in the window's signal pads rather than in its memory (a
    /// signal word from `get_signal_pad`).
    pub in_pads: bool,
}

impl<'a> Operand<'a> {
    /// `len` bytes at `offset` of the window's memory.
    pub fn new(window: &'a Window, offset: usize, len: usize) -> Self {
        Operand {
            window,
            offset,
            len,
            in_pads: false,
        }
    }
}

/// Per-call options.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpOptions {
    /// Force an engine; `None` takes the process default ([`Engine::from_env`]).
    pub engine: Option<Engine>,
    /// Wait limit; `None` takes the group's configured timeout.
    pub timeout: Option<Duration>,
    /// CUDA stream to order the op on (ignored for host memory).
    pub stream: StreamHandle,
}

const I64: usize = std::mem::size_of::<i64>();

impl Operand<'_> {
    fn symm(&self, what: &str) -> Result<SymmBuf> {
        let (layout, size) = if self.in_pads {
            let pads = self.window.pads()?;
            (pads.slots(), pads.len())
        } else {
            (self.window.layout(), self.window.size())
        };
        let end = self.offset.checked_add(self.len);
        if end.is_none_or(|end| end > size) {
            return Err(Error::invalid(format!(
                "{what}: {} bytes at offset {} overrun its window of {size} bytes",
                self.len, self.offset
            )));
        }
        Ok(SymmBuf {
            layout,
            offset: self.offset,
            len: self.len,
            room: size - self.offset,
        })
    }
}

/// Check `other` belongs to the same group as `first` (same name, rank, world and
/// provider), so that one rank index means the same process for both.
fn same_group(first: &Window, other: &Window, what: &str) -> Result<()> {
    let a = (first.group_name(), first.rank(), first.world());
    let b = (other.group_name(), other.rank(), other.world());
    if a != b || first.provider_info() != other.provider_info() {
        return Err(Error::invalid(format!(
            "{what} belongs to group {:?} (rank {} of {}) on {:?} memory, but the op runs \
             on group {:?} (rank {} of {}) on {:?} memory",
            b.0,
            b.1,
            b.2,
            other.provider_info().kind,
            a.0,
            a.1,
            a.2,
            first.provider_info().kind
        )));
    }
    Ok(())
}

fn context(
    window: &Window,
    opts: &OpOptions,
    op: &OpRequest,
    elem_size: usize,
) -> Result<OpContext> {
    let pads = window.pads()?;
    let engine = Engine::resolve(opts.engine)?;
    Ok(OpContext {
        fingerprint: Fingerprint::of(op, engine, elem_size),
        rank: window.rank(),
        world: window.world(),
        channel: ops_channel(&pads)?,
        pads,
        timeout: window.timeout(opts.timeout),
        stream: opts.stream,
        engine,
        peers: window.peers(),
    })
}

/// Whose memory an op loads from or stores to.
#[derive(Clone, Copy)]
enum Reach {
    /// A collective: every rank of the group.
    Everyone,
    /// A one-sided op: one peer.
    Peer(usize),
}

/// A one-sided op moves data by load/store through the window, so its peer must be
/// mapped here: a two-sided process-group backend cannot serve it. Refused before
/// anything is launched, never a fault on a null address in a kernel. Collectives
/// reach every rank, mapped or not (see [`super::spanning`]).
fn require_mapped(window: &Window, reach: Reach) -> Result<()> {
    match reach {
        Reach::Peer(peer) if !window.is_mapped(peer) => Err(Error::new(
            Phase::Signal,
            ErrorKind::Unsupported(format!(
                "rank(s) [{peer}] are on another host and not mapped from here: a one-sided \
                 op needs its peer mapped (a two-sided process-group backend cannot serve \
                 it); see docs/multi-node.md"
            )),
        )
        .with_peer(peer)),
        _ => Ok(()),
    }
}

/// Execute `op` with the context of `window`, attaching this rank (and a subgroup's
/// global ranks) to any error. On a group that spans hosts the spanning
/// implementation of the ops runs it, else the provider's own.
///
/// # Safety
/// Every operand of `op` was checked to lie in its live window (and any address it
/// carries is as [`super::DeviceOps::execute`] requires).
unsafe fn execute(window: &Window, reach: Reach, opts: &OpOptions, op: &OpRequest) -> Result<()> {
    // SAFETY: a propagation of the caller's assertion.
    unsafe { execute_elems(window, reach, opts, op, 1) }
}

/// [`execute`] of an op whose caller named an element size (part of the op's
/// fingerprint, see [`super::fingerprint`]).
///
/// # Safety
/// As [`execute`].
unsafe fn execute_elems(
    window: &Window,
    reach: Reach,
    opts: &OpOptions,
    op: &OpRequest,
    elem_size: usize,
) -> Result<()> {
    let go = || {
        require_mapped(window, reach)?;
        let ctx = context(window, opts, op, elem_size)?;
        if window.all_mapped() {
            // SAFETY: a propagation of the caller's assertion.
            return unsafe { window.provider().ops().execute(&ctx, op) };
        }
        let remote = window.remote_peers();
        let scope = window.signal_scope(&ctx.pads, remote.as_deref());
        let spanning = SpanningOps::new(window.provider(), scope)?;
        // SAFETY: as above.
        unsafe { super::DeviceOps::execute(&spanning, &ctx, op) }
    };
    go().map_err(|e| window.context(e))
}

/// Equal-split all-to-all (torch's `nvshmem_all_to_all`): `input` and `out` hold the
/// same bytes, a whole number of `elem_size`-byte elements that splits evenly among
/// the world size (a byte count that does would slice elements).
pub fn all_to_all(input: Operand, out: Operand, elem_size: usize, opts: &OpOptions) -> Result<()> {
    let w = input.window;
    let check = || {
        same_group(w, out.window, "out")?;
        let world = w.world();
        if input.len != out.len {
            return Err(Error::invalid(format!(
                "all_to_all: input ({} bytes) and out ({} bytes) must be of the same size",
                input.len, out.len
            )));
        }
        let per_peer = equal_chunk(input.len, elem_size, world)?;
        let (i, o) = (input.symm("input")?, out.symm("out")?);
        refuse_overlap("all_to_all", ("out", &o), ("input", &i))?;
        Ok((i, o, per_peer))
    };
    let (i, o, per_peer) = check().map_err(|e| w.context(e))?;
    let op = OpRequest::AllToAll {
        input: &i,
        out: &o,
        chunk: per_peer,
    };
    // SAFETY: both operands were checked to lie in their live windows of one group.
    unsafe { execute_elems(w, Reach::Everyone, opts, &op, elem_size) }
}

/// Bytes each rank sends each peer in an equal-split all-to-all of `len` bytes of
/// `elem_size`-byte elements: the element count must split evenly among the world.
fn equal_chunk(len: usize, elem_size: usize, world: usize) -> Result<usize> {
    if elem_size == 0 || len % elem_size != 0 {
        return Err(Error::invalid(format!(
            "all_to_all: {len} bytes are not a whole number of {elem_size}-byte elements"
        )));
    }
    let elems = len / elem_size;
    if elems % world != 0 {
        return Err(Error::invalid(format!(
            "all_to_all: {elems} elements do not split evenly among the {world} ranks: input \
             and out must hold a multiple of {world} elements"
        )));
    }
    Ok(elems / world * elem_size)
}

/// Refuse an op whose `written` operand shares bytes with `other` on this rank: a
/// peer may still read (or this rank still need) those bytes while the op writes
/// them, so the result would not be exact. Operands of different windows (or of a
/// window and its pads) never share memory.
fn refuse_overlap(op: &str, written: (&str, &SymmBuf), other: (&str, &SymmBuf)) -> Result<()> {
    let (a, b) = (written.1, other.1);
    let shares = a.len > 0
        && b.len > 0
        && a.layout == b.layout
        && a.offset < b.offset.saturating_add(b.len)
        && b.offset < a.offset.saturating_add(a.len);
    if !shares {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{op}: {} (bytes {}..{} of its window) overlaps {} (bytes {}..{}): the op writes \
         {} while it still reads {}, so it cannot give the exact result; use separate \
         buffers",
        written.0,
        a.offset,
        a.offset + a.len,
        other.0,
        b.offset,
        b.offset + b.len,
        written.0,
        other.0
    )))
}

/// The all-to-all-v family: the shape picks the op; `splits` is `in_splits`
/// (`in_splits_offsets` for [`Shape::Combine`]).
pub fn all_to_all_v(
    shape: Shape,
    input: Operand,
    out: Operand,
    splits: Operand,
    out_splits_offsets: Operand,
    rows: Rows,
    opts: &OpOptions,
) -> Result<()> {
    let w = input.window;
    let args =
        var_args(shape, input, out, splits, out_splits_offsets, rows).map_err(|e| w.context(e))?;
    let op = OpRequest::AllToAllV { shape, args: &args };
    // SAFETY: var_args checked every operand against its window, the table lengths
    // against the world size and the row counts against the operands.
    unsafe { execute(w, Reach::Everyone, opts, &op) }
}

fn var_args(
    shape: Shape,
    input: Operand,
    out: Operand,
    splits: Operand,
    out_splits_offsets: Operand,
    rows: Rows,
) -> Result<VarArgs> {
    let w = input.window;
    for (op, what) in [
        (&out, "out"),
        (&splits, "in_splits"),
        (&out_splits_offsets, "out_splits_offsets"),
    ] {
        same_group(w, op.window, what)?;
    }
    if let Shape::Dispatch { major_align: 0 } = shape {
        return Err(Error::invalid("major_align must be positive"));
    }
    let world = w.world();
    let experts = experts_per_rank(shape, splits.len, world)?;
    debug_assert_eq!(in_table_len(shape, world, experts) * I64, splits.len);
    let want = 2 * world * experts;
    if out_splits_offsets.len != want * I64 {
        return Err(Error::invalid(format!(
            "out_splits_offsets must have 2 x {} entries (shape [2, {}]), not {}",
            world * experts,
            world * experts,
            entries(out_splits_offsets.len)
        )));
    }
    for (op, what) in [
        (&splits, "in_splits"),
        (&out_splits_offsets, "out_splits_offsets"),
    ] {
        if op.offset % I64 != 0 {
            return Err(Error::invalid(format!("{what} is not 8-byte aligned")));
        }
    }
    check_rows(&rows, input.len, out.len)?;
    let args = VarArgs {
        input: input.symm("input")?,
        out: out.symm("out")?,
        in_splits: splits.symm("in_splits")?,
        out_splits_offsets: out_splits_offsets.symm("out_splits_offsets")?,
        rows,
        experts_per_rank: experts,
    };
    refuse_var_overlap(shape, &args)?;
    Ok(args)
}

/// The all-to-all-v family writes `out` and `out_splits_offsets`: neither may share
/// bytes with any other operand.
fn refuse_var_overlap(shape: Shape, args: &VarArgs) -> Result<()> {
    let name = OpRequest::AllToAllV { shape, args }.name();
    let operands = [
        ("input", &args.input),
        ("in_splits", &args.in_splits),
        ("out", &args.out),
        ("out_splits_offsets", &args.out_splits_offsets),
    ];
    for written in &operands[2..] {
        for other in operands.iter().filter(|o| o.0 != written.0) {
            refuse_overlap(name, *written, *other)?;
        }
    }
    Ok(())
}

/// `len` bytes of an int64 table as a count of entries for a message.
fn entries(len: usize) -> String {
    if len % I64 == 0 {
        (len / I64).to_string()
    } else {
        format!("{len} bytes")
    }
}

/// Experts per rank, from the length of `in_splits` (`in_splits_offsets` for
/// combine), which is checked first: every other table's length follows from it.
fn experts_per_rank(shape: Shape, len: usize, world: usize) -> Result<usize> {
    let n = entries(len);
    match shape {
        Shape::Flat if len == world * I64 => Ok(1),
        Shape::Flat => Err(Error::invalid(format!(
            "in_splits must have {world} entries, the group size, not {n}"
        ))),
        Shape::Dispatch { .. } if len > 0 && len % (world * I64) == 0 => Ok(len / (world * I64)),
        Shape::Dispatch { .. } => Err(Error::invalid(format!(
            "in_splits must have a positive multiple of {world} entries (the group size \
             times the experts per rank), not {n}"
        ))),
        Shape::Combine if len > 0 && len % (2 * world * I64) == 0 => Ok(len / (2 * world * I64)),
        Shape::Combine => Err(Error::invalid(format!(
            "in_splits_offsets must have 2 x a positive multiple of {world} entries (the \
             group size times the experts per rank), not {n}"
        ))),
    }
}

fn check_rows(rows: &Rows, in_len: usize, out_len: usize) -> Result<()> {
    let fits = |n: usize, len: usize| n.checked_mul(rows.row_bytes).is_some_and(|b| b <= len);
    if rows.row_bytes == 0 && (rows.in_rows > 0 || rows.out_rows > 0) {
        return Err(Error::invalid("rows of zero bytes"));
    }
    if !fits(rows.in_rows, in_len) || !fits(rows.out_rows, out_len) {
        return Err(Error::invalid(format!(
            "{} input rows / {} out rows of {} bytes do not fit input ({in_len} bytes) / out \
             ({out_len} bytes)",
            rows.in_rows, rows.out_rows, rows.row_bytes
        )));
    }
    Ok(())
}

/// Copy `root`'s `buf` into every rank's `buf` (torch's `nvshmem_broadcast`).
pub fn broadcast(buf: Operand, root: impl Into<Rank>, opts: &OpOptions) -> Result<()> {
    let w = buf.window;
    let check = || Ok((buf.symm("input")?, root.into().in_group(w.world(), "root")?));
    let (b, root) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::Broadcast {
        buf: &b,
        len: b.len,
        root,
    };
    // SAFETY: the operand was checked to lie in its live window.
    unsafe { execute(w, Reach::Everyone, opts, &op) }
}

/// One-sided put (`into_peer`) or get of `buf` between this rank and `peer`.
pub fn put_or_get(
    buf: Operand,
    peer: impl Into<Rank>,
    into_peer: bool,
    opts: &OpOptions,
) -> Result<()> {
    let w = buf.window;
    let check = || {
        Ok((
            buf.symm("tensor")?,
            peer.into().in_group(w.world(), "peer")?,
        ))
    };
    let (b, peer) = check().map_err(|e: Error| w.context(e))?;
    let transfer = Transfer {
        buf: &b,
        len: b.len,
        peer,
    };
    let op = if into_peer {
        OpRequest::Put(transfer)
    } else {
        OpRequest::Get(transfer)
    };
    // SAFETY: the operand was checked to lie in its live window.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

fn signal_word(sig: &Operand) -> Result<SymmBuf> {
    if sig.len < 8 || sig.offset % 8 != 0 {
        return Err(Error::invalid(format!(
            "sigpad must be an 8-byte aligned 64-bit word ({} bytes at offset {})",
            sig.len, sig.offset
        )));
    }
    let mut word = sig.symm("sigpad")?;
    word.len = 8;
    Ok(word)
}

/// Put `buf` to `peer`, then set `peer`'s 64-bit `sig` to `value` (torch's
/// `nvshmem_put_with_signal`). `sig` may live in another window of the same group
/// (a signal pad).
pub fn put_with_signal(
    buf: Operand,
    sig: Operand,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = buf.window;
    let check = || {
        same_group(w, sig.window, "sigpad")?;
        let (b, s) = (buf.symm("tensor")?, signal_word(&sig)?);
        refuse_overlap("put_with_signal", ("sigpad", &s), ("tensor", &b))?;
        Ok((b, s, peer.into().in_group(w.world(), "peer")?))
    };
    let (b, s, peer) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::PutWithSignal {
        put: Transfer {
            buf: &b,
            len: b.len,
            peer,
        },
        sig: &s,
        value,
    };
    // SAFETY: both operands were checked to lie in their live windows.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

/// Wait until this rank's 64-bit `sig` equals `value`, then reset it to zero.
pub fn wait_for_signal(
    sig: Operand,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = sig.window;
    let check = || {
        let word = signal_word(&sig)?.addr(w.rank())?;
        Ok((word, peer.into().in_group(w.world(), "peer")?))
    };
    let (word, peer) = check().map_err(|e: Error| w.context(e))?;
    let wait = SignalWait {
        word,
        value,
        rank: w.rank(),
        peer,
        timeout: w.timeout(opts.timeout),
        stream: opts.stream,
        peers: w.peers(),
    };
    // SAFETY: the word was checked to lie, aligned, in this rank's live window.
    unsafe { w.provider().ops().wait_for_signal(&wait) }.map_err(|e| w.context(e))
}

/// [`wait_for_signal`] on a word given by address, as torch's `wait_for_signal` gives
/// it (a tensor, possibly a view of a signal pad): the 8-byte aligned word must lie in
/// symmetric memory of this process on `group`'s device (a live allocation of
/// `registry` or one of `group`'s signal pads), and `peer` must be a rank of `group`.
/// Anything else is refused at once: a wait on memory no peer can write would only
/// run out its timeout.
///
/// # Safety
/// The word is accessed only atomically until the wait returns (for CUDA: until it
/// completes on its stream, and the memory must stay allocated until then).
pub unsafe fn wait_for_signal_at(
    registry: &Registry,
    group: &Group,
    word: usize,
    value: u64,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let go = || {
        let peer = peer.into().in_group(group.world(), "peer")?;
        if word == 0 || word % 8 != 0 {
            return Err(Error::invalid(format!(
                "wait_for_signal: sigpad at {word:#x} is not an 8-byte aligned 64-bit word"
            )));
        }
        let (provider, _keep_alive) = symmetric_word(registry, group, word)?;
        let shared = &group.shared;
        let timeout = opts.timeout.unwrap_or_else(|| {
            (provider.info().kind).wait_limit(shared.timeout, shared.device_timeout)
        });
        let wait = SignalWait {
            word,
            value,
            rank: group.rank(),
            peer,
            timeout,
            stream: opts.stream,
            peers: shared.peer_set(),
        };
        // SAFETY: the word lies, aligned, in live symmetric memory of `provider` held
        // by `_keep_alive` for the call; the caller vouches for stream-ordered waits.
        unsafe { provider.ops().wait_for_signal(&wait) }
    };
    go().map_err(|e| group.shared.context(e))
}

/// What proves `word` is symmetric memory of `group`'s device: the provider to wait
/// with, and the allocation or pad pool that keeps the word mapped meanwhile.
fn symmetric_word(
    registry: &Registry,
    group: &Group,
    word: usize,
) -> Result<(Arc<dyn Provider>, Box<dyn std::any::Any>)> {
    let info = group.provider().info();
    if let Some((alloc, offset)) = registry.find(word) {
        let fits = offset.checked_add(8).is_some_and(|end| end <= alloc.size());
        if fits && alloc.provider().info() == info {
            return Ok((alloc.provider().clone(), Box::new(alloc)));
        }
    }
    if let Some(pool) = group.shared.pads.holding(group.rank(), word, 8) {
        return Ok((group.provider().clone(), Box::new(pool)));
    }
    Err(Error::invalid(format!(
        "wait_for_signal: sigpad at {word:#x} is not symmetric memory of group {:?} on {:?} \
         memory (a symmwin allocation or a signal pad of this rank): no peer can signal it, \
         so the wait could only time out",
        group.name(),
        info.kind
    )))
}

/// Copy `len` bytes from this process's address `src` into `peer`'s `dst`, then signal
/// `peer` on channel 0 of `dst`'s window (torch's `nccl_put_signal`).
///
/// # Safety
/// `src..src+len` must be readable memory of the window's provider (host memory for
/// host windows, device memory of the window's device for CUDA), live until the op
/// completes on its stream.
pub unsafe fn put_signal(
    src: usize,
    len: usize,
    dst: Operand,
    peer: impl Into<Rank>,
    opts: &OpOptions,
) -> Result<()> {
    let w = dst.window;
    let check = || {
        let mut d = dst.symm("hdl")?;
        if len > d.room {
            return Err(Error::invalid(format!(
                "put_signal: {len} bytes do not fit the peer's buffer of {} bytes",
                d.room
            )));
        }
        d.len = len;
        Ok((d, peer.into().in_group(w.world(), "peer")?))
    };
    let (d, peer) = check().map_err(|e: Error| w.context(e))?;
    let op = OpRequest::PutSignal {
        src,
        len,
        dst: &d,
        peer,
    };
    // SAFETY: `dst` was checked against its window; the caller vouches for `src`.
    unsafe { execute(w, Reach::Peer(peer), opts, &op) }
}

/// Wait for `peer`'s [`put_signal`] on `window` (channel 0).
pub fn wait_signal(window: &Window, peer: impl Into<Rank>, opts: &OpOptions) -> Result<()> {
    let peer = (peer.into().in_group(window.world(), "peer")).map_err(|e| window.context(e))?;
    let mut options = SignalOptions::channel(0).stream(Stream::from_raw(opts.stream));
    if let Some(timeout) = opts.timeout {
        options = options.timeout(timeout);
    }
    window.wait_signal(peer, options)
}

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
    // SAFETY: every tile was checked to lie in its live window with the tile's extent.
    unsafe { execute(w, Reach::Everyone, opts, &op) }
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
