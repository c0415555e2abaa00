//! The safe API of the ops: operands are windows and byte offsets. Every range,
//! group and table length is checked here, once, before a provider sees an address.

mod all_to_all;
mod one_sided;
mod tile;

use std::time::Duration;

use std::sync::Arc;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

use crate::group::Group;
use crate::registry::Registry;
use crate::signal::{SignalOptions, Stream};
use crate::window::Window;
use symmwin_device::provider::{Provider, StreamHandle};

pub use all_to_all::{all_to_all, all_to_all_v};
pub use one_sided::{
    put_or_get, put_signal, put_with_signal, wait_for_signal, wait_for_signal_at, wait_signal,
};
pub use tile::tile_reduce;

use super::rank::Rank;
use super::spanning::SpanningOps;
use super::{ops_channel, Engine};
use symmwin_device::provider::device_ops::plan::{in_table_len, Shape};
use symmwin_device::provider::device_ops::{DType, Elements, Fingerprint, OpRequest};
use symmwin_device::provider::device_ops::{
    OpContext, ReduceOp, Rows, SignalWait, SymmBuf, Tile, TileReduce, Transfer, VarArgs,
};

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
    /// What its elements are (part of a collective's fingerprint: ranks that pass
    /// another dtype fail); [`DType::UNSPECIFIED`] for bytes.
    pub dtype: DType,
}

impl<'a> Operand<'a> {
    /// `len` bytes at `offset` of the window's memory.
    pub fn new(window: &'a Window, offset: usize, len: usize) -> Self {
        Operand {
            window,
            offset,
            len,
            in_pads: false,
            dtype: DType::UNSPECIFIED,
        }
    }

    /// The same operand, holding elements of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        Operand { dtype, ..self }
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
    elems: Elements,
) -> Result<OpContext> {
    let pads = window.pads()?;
    let engine = Engine::resolve(opts.engine)?;
    Ok(OpContext {
        fingerprint: Fingerprint::of(op, engine, elems),
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
    unsafe { execute_elems(window, reach, opts, op, Elements::BYTES) }
}

/// [`execute`] of an op on operands that hold `elems` (part of the op's operand
/// fingerprint, see `provider::device_ops::fingerprint`).
///
/// # Safety
/// As [`execute`].
unsafe fn execute_elems(
    window: &Window,
    reach: Reach,
    opts: &OpOptions,
    op: &OpRequest,
    elems: Elements,
) -> Result<()> {
    let go = || {
        require_mapped(window, reach)?;
        let ctx = context(window, opts, op, elems)?;
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
    // A poisoned window refuses the op before any peer's data is touched; a wait of the
    // op that ends early poisons it (an operand mismatch, found after both barriers,
    // does not: the pads are balanced then).
    let channel = match op {
        OpRequest::PutSignal { .. } => 0,
        _ => window
            .pads()
            .ok()
            .and_then(|p| ops_channel(&p).ok())
            .unwrap_or(0),
    };
    window.guarded(op.name(), channel, || go().map_err(|e| window.context(e)))
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
    unsafe { execute_elems(w, Reach::Everyone, opts, &op, Elements::of(buf.dtype)) }
}

/// The elements of an op whose operands must all hold one dtype: refused when
/// `other` holds another one than `first` (each named as the op calls it).
fn same_dtype(op: &str, first: (&str, &Operand), other: (&str, &Operand)) -> Result<()> {
    if first.1.dtype == other.1.dtype {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{op}: {} is {} but {} is {}: they must hold one dtype",
        first.0, first.1.dtype, other.0, other.1.dtype
    )))
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
