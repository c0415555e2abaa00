//! Local memory that can later become a window of any group.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use symmwin_device::lock::Recover;

use crate::export_ahead::ExportAhead;
use crate::window_cache::{self, GroupKey, Parked, WindowSpan};
use symmwin_device::error::{Error, Result};
use symmwin_device::layout::round_up;
use symmwin_device::provider::{Memory, Provider, SharedHandle, Span};

/// Physical memory plus this process's own mapping of it. Cheap to clone.
///
/// Dropping the last clone unmaps the local view and releases the handle; windows
/// made from it keep the memory alive through their own mappings. An allocation
/// that became exactly one window is parked whole in the window cache once
/// that window and the allocation are both gone.
#[derive(Clone)]
pub struct Allocation {
    inner: Arc<AllocationInner>,
}

struct AllocationInner {
    id: u64,
    size: usize,
    ptr: usize,
    /// Always `Some` until drop, which may hand it to the window cache.
    local: Option<Box<dyn Span>>,
    memory: Arc<dyn Memory>,
    /// The handle exported when the memory was made, until a rendezvous takes it;
    /// later rendezvous (of other groups) export again.
    ahead: Mutex<Option<ExportAhead>>,
    provider: Arc<dyn Provider>,
    /// Windows made from this allocation.
    windows: AtomicUsize,
    /// The memory came back from the window cache.
    reused: bool,
    /// A released window whose own slot is this memory, until a rendezvous takes it.
    reuse: Mutex<Option<WindowSpan>>,
    /// The one window made from this allocation, once its last user is gone.
    parked: Mutex<Option<WindowSpan>>,
    /// An offer or a handle for this memory went out in a rendezvous that failed here:
    /// a peer may map it and write into it, so it never goes to the window cache.
    shared_in_failed_call: AtomicBool,
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("id", &self.inner.id)
            .field("size", &self.inner.size)
            .field("ptr", &format_args!("{:#x}", self.inner.ptr))
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Allocation {
    /// `size` zero-filled bytes (rounded up to the provider's granularity).
    pub fn new(provider: Arc<dyn Provider>, size: usize) -> Result<Self> {
        if size == 0 {
            return Err(Error::invalid("cannot allocate 0 bytes"));
        }
        let info = provider.info();
        let physical = round_up(size, info.granularity)?;
        if let Some(parked) = window_cache::take(&provider, physical) {
            return Self::reuse(parked, size);
        }
        let memory: Arc<dyn Memory> = Arc::from(provider.create(physical)?);
        // Exporting overlaps mapping and zeroing the local view, and whatever the
        // caller does before its rendezvous.
        let ahead = ExportAhead::start(Arc::clone(&memory));
        let mut local = provider.reserve(physical)?;
        local.map(0, memory.as_ref())?;
        if !info.zero_on_create {
            local.zero(0, physical)?;
        }
        Ok(Self::assemble(
            size,
            local,
            memory,
            Some(ahead),
            None,
            provider,
        ))
    }

    /// Memory of a window released on every rank (the cache zeroed it again when
    /// it released it); its rendezvous exports only if the window cannot be taken
    /// over whole.
    fn reuse(parked: Parked, size: usize) -> Result<Self> {
        Ok(Self::assemble(
            size,
            parked.local,
            parked.memory,
            None,
            Some(parked.window),
            parked.provider,
        ))
    }

    fn assemble(
        size: usize,
        local: Box<dyn Span>,
        memory: Arc<dyn Memory>,
        ahead: Option<ExportAhead>,
        reuse: Option<WindowSpan>,
        provider: Arc<dyn Provider>,
    ) -> Self {
        Allocation {
            inner: Arc::new(AllocationInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                size,
                ptr: local.base(),
                local: Some(local),
                memory,
                ahead: Mutex::new(ahead),
                provider,
                windows: AtomicUsize::new(0),
                reused: reuse.is_some(),
                reuse: Mutex::new(reuse),
                parked: Mutex::new(None),
                shared_in_failed_call: AtomicBool::new(false),
            }),
        }
    }

    /// Whether this allocation's memory came back from the window cache.
    pub fn is_reused(&self) -> bool {
        self.inner.reused
    }

    /// The rendezvous number of the released window of `group` this allocation can
    /// take over whole, if any.
    pub(crate) fn reuse_offer(&self, group: GroupKey) -> Option<u64> {
        self.inner
            .reuse
            .lock()
            .recover()
            .as_ref()
            .filter(|w| w.of(group) && self.inner.windows.load(Ordering::SeqCst) == 0)
            .map(|w| w.seq)
    }

    /// Take the released window back (its span becomes the new window's), or drop it.
    pub(crate) fn take_reuse(&self) -> Option<WindowSpan> {
        self.inner.reuse.lock().recover().take()
    }

    /// Count a window made from this allocation.
    pub(crate) fn window_made(&self) {
        self.inner.windows.fetch_add(1, Ordering::SeqCst);
    }

    /// A rendezvous of this memory failed here after its offer or handle may have gone
    /// out: a peer may complete that call and write into our memory, so the released
    /// window it took is let go for good (the peers' mappings keep their pages alive)
    /// and no window of it is ever cached.
    pub(crate) fn shared_in_failed_call(&self) {
        self.inner
            .shared_in_failed_call
            .store(true, Ordering::SeqCst);
        drop(self.take_reuse());
    }

    /// Whether a rendezvous of this memory failed after its offer or handle may have
    /// gone out: it then never goes to the window cache.
    pub fn was_shared_in_failed_call(&self) -> bool {
        self.inner.shared_in_failed_call.load(Ordering::SeqCst)
    }

    /// The last user of a window made from this allocation is gone: keep its span
    /// for the cache if it was the allocation's only window, else let it go.
    pub(crate) fn window_gone(&self, window: WindowSpan) {
        let cacheable = !self.was_shared_in_failed_call();
        if cacheable && self.inner.windows.load(Ordering::SeqCst) == 1 {
            *self.inner.parked.lock().recover() = Some(window);
        }
    }

    /// Address of this process's view.
    pub fn ptr(&self) -> usize {
        self.inner.ptr
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Physical bytes (a multiple of the granularity).
    pub fn alloc_size(&self) -> usize {
        self.inner.memory.len()
    }

    /// Process-unique id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The provider it came from.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.inner.provider
    }

    /// The physical memory (for export).
    pub(crate) fn memory(&self) -> &dyn Memory {
        self.inner.memory.as_ref()
    }

    /// A shareable handle to the memory: the one exported ahead if no rendezvous has
    /// taken it yet (waiting for it if needed), a new one otherwise.
    pub(crate) fn export(&self) -> Result<SharedHandle> {
        let ahead = self.inner.ahead.lock().recover().take();
        match ahead {
            Some(ahead) => ahead.wait(),
            None => self.inner.memory.export(),
        }
    }

    /// Whether [`Allocation::export`] would return without waiting for the export
    /// started when the memory was made (true too when there is none: it then
    /// exports on the spot).
    pub(crate) fn handle_ready(&self) -> bool {
        self.inner
            .ahead
            .lock()
            .recover()
            .as_ref()
            .is_none_or(ExportAhead::is_ready)
    }

    /// Offset of `ptr` inside this allocation's local view, if it is inside.
    pub fn offset_of(&self, ptr: usize) -> Option<usize> {
        let off = ptr.checked_sub(self.ptr())?;
        (off < self.inner.size).then_some(off)
    }
}

impl Drop for AllocationInner {
    /// Local only: an allocation whose only window is gone is parked with it; one
    /// that took a released window and never used it puts the window back.
    fn drop(&mut self) {
        let Some(local) = self.local.take() else {
            return;
        };
        let parked = self.parked.get_mut().recover().take();
        let unused = self.reuse.get_mut().recover().take();
        let entry = |window| Parked {
            window,
            memory: Arc::clone(&self.memory),
            local,
            provider: Arc::clone(&self.provider),
        };
        if *self.shared_in_failed_call.get_mut() {
            return;
        }
        match (parked, unused) {
            (Some(window), _) => window_cache::park(entry(window)),
            (None, Some(window)) if *self.windows.get_mut() == 0 => {
                window_cache::restore(entry(window))
            }
            _ => {}
        }
    }
}
