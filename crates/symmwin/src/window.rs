//! A window: every rank's memory mapped at `base + rank * stride` in this process.
//!
//! Two addresses reach this rank's own memory: its slot of the span (an alias mapped
//! with the peers', so that the span is whole for arithmetic addressing), and the
//! allocation's own view, the pointer `alloc` returned. [`Window::ptrs`] reports the
//! allocation's view for the own rank, as torch's backends do (programs compare it with
//! the tensor's address); [`Window::slots`] reports the span. Two virtual addresses of
//! one page have no L1 coherence promise inside one CUDA kernel, so each of our kernels
//! reaches the own memory through its slot only.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmwin_device::lock::Recover;

use crate::allocation::Allocation;
use crate::group::GroupShared;
use crate::signal::pad_pool::PadLease;
use crate::signal::remote::{Direction, RemotePeers, SignalScope};
use crate::signal::{SignalOptions, Stream};
use crate::window_cache::WindowSpan;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::layout::FlatLayout;
use symmwin_device::poison::Poison;
use symmwin_device::provider::{
    PadLayout, PadSignal, ProviderInfo, ProviderKind, SignalAt, Signals, Span, Table,
};
use symmwin_host::poison_marks;

/// A symmetric window. Cheap to clone; the mapping lives until the last clone drops.
#[derive(Clone)]
pub struct Window {
    inner: Arc<WindowInner>,
}

struct WindowInner {
    // Field order is drop order: tables and pad go before the span they point into.
    tables: Mutex<Tables>,
    pad: Option<PadLease>,
    /// Always `Some` until drop, which may hand it back to `origin`.
    span: Option<Box<dyn Span>>,
    layout: FlatLayout,
    size: usize,
    /// `mapped[r]`: rank r's memory (and pad) is mapped here; the others are on
    /// another host and reached through the group's process-group backend.
    mapped: Vec<bool>,
    group: Arc<GroupShared>,
    /// The allocation whose memory is this rank's slot: its own view (the pointer
    /// `alloc` returned) is the own entry of [`Window::ptrs`], kept mapped while the
    /// window lives even when the tensor that owned it is freed.
    local: Allocation,
    /// The allocation this window was made from and the rendezvous number that made
    /// it: on drop the span goes back to the allocation, for the window cache.
    origin: Option<(Allocation, u64)>,
}

impl Drop for WindowInner {
    fn drop(&mut self) {
        if let (Some((alloc, seq)), Some(span)) = (self.origin.take(), self.span.take()) {
            if self.poisoned().is_some() {
                // A poisoned window is never parked, so never handed out again: its
                // peers' pads are out of step with ours.
                alloc.shared_in_failed_call();
            }
            alloc.window_gone(WindowSpan {
                group: self.group.cache_key,
                seq,
                span,
                layout: self.layout,
            });
        }
    }
}

impl WindowInner {
    /// The record in this rank's poison mark of the window's pads, if set.
    fn poisoned(&self) -> Option<Poison> {
        let pads = self.pad.as_ref()?.layout(self.group.rank).ok()?;
        poison_marks::read(&pads)
    }
}

#[derive(Default)]
struct Tables {
    buffers: Option<Box<dyn Table>>,
    slots: Option<Box<dyn Table>>,
    pads: Option<Box<dyn Table>>,
    global_ranks: Option<Box<dyn Table>>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("group", &self.inner.group.name)
            .field("rank", &self.inner.group.rank)
            .field("layout", &self.inner.layout)
            .field("size", &self.inner.size)
            .finish()
    }
}

impl Window {
    /// The window of `local` over `span`; `origin` is set when the span may go back to
    /// `local` for the window cache, with the rendezvous number that made it.
    #[allow(clippy::too_many_arguments)] // one call site, the rendezvous, names each part
    pub(crate) fn new(
        group: Arc<GroupShared>,
        span: Box<dyn Span>,
        layout: FlatLayout,
        pad: Option<PadLease>,
        mapped: Vec<bool>,
        local: &Allocation,
        origin: Option<u64>,
    ) -> Self {
        let origin = origin.map(|seq| (local.clone(), seq));
        if let Some((alloc, _)) = &origin {
            alloc.window_made();
        }
        Window {
            inner: Arc::new(WindowInner {
                tables: Mutex::default(),
                pad,
                span: Some(span),
                layout,
                size: local.size(),
                mapped,
                group,
                local: local.clone(),
                origin,
            }),
        }
    }

    /// This process's rank in the window's group.
    pub fn rank(&self) -> usize {
        self.inner.group.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.inner.layout.world
    }

    /// Name of the group.
    pub fn group_name(&self) -> &str {
        &self.inner.group.name
    }

    /// Bytes usable in each rank's slot (what was asked for).
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The flat layout: rank r's memory is at `base + r * stride`.
    pub fn layout(&self) -> FlatLayout {
        self.inner.layout
    }

    /// Address of `rank`'s memory in this process as torch's contract has it: for this
    /// rank the allocation's own view ([`Window::local_ptr`]), for a peer its slot; an
    /// error for a rank that is not mapped (see [`Window::is_mapped`]).
    pub fn ptr(&self, rank: usize) -> Result<usize> {
        let slot = self.slot(rank)?;
        Ok(if rank == self.rank() {
            self.local_ptr()
        } else {
            slot
        })
    }

    /// Every rank's [`Window::ptr`], in rank order; 0 for ranks not mapped.
    pub fn ptrs(&self) -> Vec<usize> {
        let mut ptrs = self.slots();
        ptrs[self.rank()] = self.local_ptr();
        ptrs
    }

    /// The pointer `alloc` returned for this rank's allocation: this rank's memory
    /// through its own view, the same pages as its slot of the span.
    pub fn local_ptr(&self) -> usize {
        self.inner.local.ptr()
    }

    /// Start of `rank`'s slot of the flat span (`base + rank * stride`; for this rank
    /// an alias of [`Window::local_ptr`]); an error for a rank that is not mapped.
    pub fn slot(&self, rank: usize) -> Result<usize> {
        let slot = self
            .inner
            .layout
            .slot(rank)
            .map_err(|e| self.inner.group.context(e))?;
        if !self.is_mapped(rank) {
            return Err(Error::new(
                Phase::Argument,
                ErrorKind::Unsupported(format!(
                    "rank {rank} is on another host: its memory is not mapped here"
                )),
            )
            .with_peer(rank))
            .map_err(|e| self.inner.group.context(e));
        }
        Ok(slot)
    }

    /// Every rank's [`Window::slot`], in rank order; 0 for ranks not mapped.
    pub fn slots(&self) -> Vec<usize> {
        self.only_mapped(self.inner.layout.slots())
    }

    /// True when `rank`'s memory is mapped here (always true for our own rank).
    pub fn is_mapped(&self, rank: usize) -> bool {
        self.inner.mapped.get(rank).copied().unwrap_or(false)
    }

    /// The ranks whose memory is mapped here, in rank order.
    pub fn mapped_ranks(&self) -> Vec<usize> {
        (0..self.world()).filter(|&r| self.is_mapped(r)).collect()
    }

    /// True when every rank is mapped (torch's `world_within_direct_access`).
    pub fn all_mapped(&self) -> bool {
        self.inner.mapped.iter().all(|&m| m)
    }

    /// The group's process-group backend for ranks that are not mapped (set by the
    /// adapter); device operations send their traffic to those ranks through it.
    pub fn remote_peers(&self) -> Option<Arc<dyn RemotePeers>> {
        self.inner.group.remote_peers()
    }

    fn only_mapped(&self, addresses: Vec<usize>) -> Vec<usize> {
        addresses
            .into_iter()
            .enumerate()
            .map(|(r, a)| if self.is_mapped(r) { a } else { 0 })
            .collect()
    }

    /// Provider kind, device and handle type.
    pub fn provider_info(&self) -> ProviderInfo {
        self.inner.group.provider.info()
    }

    /// Global rank of each group rank.
    pub fn global_ranks(&self) -> &[i32] {
        &self.inner.group.global_ranks
    }

    /// Signal pad bytes per rank (0 when the window has no pads).
    pub fn pad_size(&self) -> usize {
        self.inner.pad.as_ref().map_or(0, PadLease::pad_size)
    }

    /// Addresses of every rank's signal pad (0 for ranks not mapped); empty when
    /// the window has none.
    pub fn pad_ptrs(&self) -> Vec<usize> {
        match self.pads() {
            Ok(pads) => self.only_mapped(pads.slots().slots()),
            Err(_) => Vec::new(),
        }
    }

    /// Device-visible array of [`Window::ptrs`] (made on first use).
    pub fn ptrs_dev(&self) -> Result<usize> {
        self.table(|t| &mut t.buffers, || words(self.ptrs()))
    }

    /// Device-visible array of [`Window::slots`] (made on first use).
    pub fn slots_dev(&self) -> Result<usize> {
        self.table(|t| &mut t.slots, || words(self.slots()))
    }

    /// Device-visible array of [`Window::pad_ptrs`] (made on first use).
    pub fn pad_ptrs_dev(&self) -> Result<usize> {
        self.table(|t| &mut t.pads, || words(self.pad_ptrs()))
    }

    /// Device-visible `int32` array of [`Window::global_ranks`].
    pub fn global_ranks_dev(&self) -> Result<usize> {
        self.table(
            |t| &mut t.global_ranks,
            || {
                // Pack int32 pairs into words: the table is an array of i32 on the device.
                let ranks = self.global_ranks();
                ranks
                    .chunks(2)
                    .map(|c| {
                        let lo = c[0] as u32 as u64;
                        let hi = c.get(1).map_or(0, |&h| h as u32 as u64);
                        lo | (hi << 32)
                    })
                    .collect()
            },
        )
    }

    fn table(
        &self,
        field: impl Fn(&mut Tables) -> &mut Option<Box<dyn Table>>,
        words: impl Fn() -> Vec<u64>,
    ) -> Result<usize> {
        let mut tables = self.inner.tables.lock().recover();
        let slot = field(&mut tables);
        if let Some(table) = slot {
            return Ok(table.ptr());
        }
        let table = self
            .inner
            .group
            .provider
            .upload(&words())
            .map_err(|e| self.inner.group.context(e))?;
        let ptr = table.ptr();
        *slot = Some(table);
        Ok(ptr)
    }

    /// The provider the window's memory comes from (the ops run on it).
    pub(crate) fn provider(&self) -> &dyn symmwin_device::provider::Provider {
        &*self.inner.group.provider
    }

    /// `e` with this rank and, on a subgroup, the group's global ranks (for
    /// the ops, whose errors read as the window's own).
    pub(crate) fn context(&self, e: Error) -> Error {
        self.inner.group.context(e)
    }

    /// The window's signal pads (an error when it has none).
    pub(crate) fn pads(&self) -> Result<PadLayout> {
        let pad =
            self.inner.pad.as_ref().ok_or_else(|| {
                Error::invalid("this window has no signal pads").at_rank(self.rank())
            })?;
        pad.layout(self.rank()).map_err(|e| e.at_rank(self.rank()))
    }

    /// The limit of a signal operation or op given `timeout` (None: the configured
    /// one, the device-wait limit for CUDA memory and the group's timeout for host
    /// memory).
    /// The group's watched peers, for waits to name one that has ended.
    pub(crate) fn peers(&self) -> symmwin_device::peer_watch::PeerSet {
        self.inner.group.peer_set()
    }

    pub(crate) fn timeout(&self, timeout: Option<Duration>) -> Duration {
        let group = &self.inner.group;
        timeout.unwrap_or_else(|| {
            (group.provider.info().kind).wait_limit(group.timeout, group.device_timeout)
        })
    }

    /// Run one signal operation of the provider on this window's pads.
    fn signal_op(
        &self,
        timeout: Option<Duration>,
        op: impl FnOnce(&dyn Signals, &PadLayout, Duration) -> Result<()>,
    ) -> Result<()> {
        let pads = self.pads()?;
        op(
            self.inner.group.provider.signals(),
            &pads,
            self.timeout(timeout),
        )
        .map_err(|e| self.inner.group.context(e))
    }

    /// Run one signal operation over a group that spans hosts: pads for the mapped
    /// ranks, the group's process-group backend for the others.
    fn spanning_op(
        &self,
        timeout: Option<Duration>,
        op: impl FnOnce(&SignalScope<'_>, Duration) -> Result<()>,
    ) -> Result<()> {
        let pads = self.pads()?;
        let remote = self.remote_peers();
        let scope = self.signal_scope(&pads, remote.as_deref());
        op(&scope, self.timeout(timeout)).map_err(|e| self.inner.group.context(e))
    }

    /// This window's view of its group for signal work over `pads`: pads for the
    /// mapped ranks, `remote` for the others.
    pub(crate) fn signal_scope<'a>(
        &'a self,
        pads: &'a PadLayout,
        remote: Option<&'a dyn RemotePeers>,
    ) -> SignalScope<'a> {
        SignalScope {
            signals: self.inner.group.provider.signals(),
            pads,
            mapped: &self.inner.mapped,
            remote,
            group: &self.inner.group.name,
            stream_ordered: self.provider_info().kind == ProviderKind::Cuda,
        }
    }

    /// Signal every peer and wait for all of them, on the channel, timeout and stream
    /// of `options` (the stream orders the operation on the device; host memory
    /// ignores it).
    pub fn barrier(&self, options: SignalOptions) -> Result<()> {
        let (channel, stream) = (options.channel_index(), options.stream_handle().raw());
        self.guarded("barrier", channel, || {
            if !self.all_mapped() {
                return self.spanning_op(options.timeout_given(), |s, t| {
                    s.barrier(SignalAt::new(channel, t, stream))
                });
            }
            self.signal_op(options.timeout_given(), |s, pads, t| {
                let at = SignalAt::new(channel, t, stream).watching(self.peers());
                s.signal(pads, PadSignal::Barrier, at)
            })
        })
    }

    /// The poison record of this window, if a host signal wait on it ended without
    /// completing (on any rank): then every call on it fails ([`ErrorKind::Poisoned`]).
    pub fn poisoned(&self) -> Option<Poison> {
        self.inner.poisoned()
    }

    /// Fail with [`ErrorKind::Poisoned`] when the window is poisoned: the first step of
    /// every call on it.
    pub(crate) fn check_poison(&self) -> Result<()> {
        match self.poisoned() {
            None => Ok(()),
            Some(poison) => Err(self.context(poison_marks::refused(poison).at_rank(self.rank()))),
        }
    }

    /// Run `call` (named `name`, on pad `channel`) unless the window is poisoned; when
    /// its wait ends without completing, poison the window on every mapped rank
    /// before returning the error (host pads: CUDA pads have no marks, and a device
    /// wait that fails traps instead).
    pub(crate) fn guarded(
        &self,
        name: &'static str,
        channel: usize,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.check_poison()?;
        call().map_err(|e| self.poison_after(name, channel, e))
    }

    /// `e` from `name` on `channel`: the window poisoned first when `e` ended a wait
    /// early and the pads have marks.
    fn poison_after(&self, name: &'static str, channel: usize, e: Error) -> Error {
        let Some(poison) = e.poison_record(name, channel, self.rank()) else {
            return e;
        };
        let Some(pads) = self.pads().ok().filter(|p| p.mark(p.rank()).is_some()) else {
            return e;
        };
        let first = poison_marks::poison(&pads, |r| self.is_mapped(r), poison.clone());
        tracing::debug!("rank {} poisoned its window: {first}", self.rank());
        e.poisoning(poison)
    }

    /// Signal rank `dst` on the channel of `options`.
    pub fn put_signal(&self, dst: usize, options: SignalOptions) -> Result<()> {
        self.point_to_point(dst, Direction::Send, options)
    }

    /// Wait for rank `src`'s signal on the channel of `options`.
    pub fn wait_signal(&self, src: usize, options: SignalOptions) -> Result<()> {
        self.point_to_point(src, Direction::Recv, options)
    }

    /// One signal to or from `peer`: through the pads where it is mapped here, through
    /// the process-group backend where it is on another host.
    fn point_to_point(
        &self,
        peer: usize,
        direction: Direction,
        options: SignalOptions,
    ) -> Result<()> {
        let (channel, stream) = (options.channel_index(), options.stream_handle().raw());
        let (op, name) = match direction {
            Direction::Send => (PadSignal::Put(peer), "put_signal"),
            Direction::Recv => (PadSignal::Wait(peer), "wait_signal"),
        };
        self.guarded(name, channel, || {
            if peer < self.world() && !self.is_mapped(peer) {
                return self.spanning_op(options.timeout_given(), |s, t| {
                    s.remote_signal(peer, direction, channel, t, stream)
                });
            }
            self.signal_op(options.timeout_given(), |s, pads, t| {
                let at = SignalAt::new(channel, t, stream).watching(self.peers());
                s.signal(pads, op, at)
            })
        })
    }

    /// Fails with [`crate::ErrorKind::ContextLost`] once a device-side wait of this
    /// process has timed out and trapped (device operations are asynchronous: the call
    /// that launched the wait has returned by then).
    pub fn check_errors(&self) -> Result<()> {
        self.inner
            .group
            .provider
            .signals()
            .check_errors()
            .map_err(|e| self.inner.group.context(e))
    }

    /// Wait for the signal operations enqueued on `stream`; a device-side timeout among
    /// them fails as [`crate::ErrorKind::ContextLost`].
    pub fn synchronize(&self, stream: Stream) -> Result<()> {
        self.inner
            .group
            .provider
            .signals()
            .synchronize(stream.raw())
            .map_err(|e| self.inner.group.context(e))
    }

    /// Zero `len` bytes of this rank's slot at `offset` (complete on return).
    pub fn zero_own(&self, offset: usize, len: usize) -> Result<()> {
        let layout = &self.inner.layout;
        let range = layout
            .slot_range(self.rank(), offset, len)
            .map_err(|_| Error::invalid("range overruns this rank's slot").at_rank(self.rank()))?;
        let span = self
            .inner
            .span
            .as_ref()
            .ok_or_else(|| Error::invalid("window is being torn down").at_rank(self.rank()))?;
        // The layout starts at the span's base (rank 0's slot is the span's first byte).
        span.zero(range.start - layout.base, len)
    }

    /// Range check: `len` bytes at `offset` of `rank`'s slot; the absolute address
    /// (in the span, for this rank too: our copies reach the own memory through one
    /// address, its slot).
    fn slot_range(&self, rank: usize, offset: usize, len: usize) -> Result<usize> {
        self.slot(rank)?;
        let range = self.inner.layout.slot_range(rank, offset, len);
        range.map(|r| r.start).map_err(|e| e.at_rank(self.rank()))
    }

    /// Copy host bytes into `rank`'s slot at `offset` (complete on return).
    pub fn write(&self, rank: usize, offset: usize, bytes: &[u8]) -> Result<()> {
        let dst = self.slot_range(rank, offset, bytes.len())?;
        // SAFETY: slot_range checked the destination lies in this window's mapped span,
        // which lives as long as `self`.
        unsafe { self.inner.group.provider.write(dst, bytes) }
    }

    /// Copy from `rank`'s slot at `offset` into host bytes (complete on return).
    pub fn read(&self, rank: usize, offset: usize, bytes: &mut [u8]) -> Result<()> {
        let src = self.slot_range(rank, offset, bytes.len())?;
        // SAFETY: as in `write`, for the source range.
        unsafe { self.inner.group.provider.read(src, bytes) }
    }

    /// Copy `len` bytes between two slots of this window (complete on return): a
    /// copy-engine transfer on CUDA.
    pub fn copy(&self, dst: (usize, usize), src: (usize, usize), len: usize) -> Result<()> {
        let to = self.slot_range(dst.0, dst.1, len)?;
        let from = self.slot_range(src.0, src.1, len)?;
        // SAFETY: both ranges were checked to lie in this window's mapped span.
        unsafe { self.inner.group.provider.copy(to, from, len) }
    }
}

/// A device table of `addresses`, one 64-bit word each.
fn words(addresses: Vec<usize>) -> Vec<u64> {
    addresses.into_iter().map(|a| a as u64).collect()
}
