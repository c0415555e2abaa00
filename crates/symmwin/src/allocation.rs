//! Local memory that can later become a window of any group.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::export_ahead::ExportAhead;
use crate::layout::round_up;
use crate::provider::{Memory, Provider, SharedHandle, Span};

/// Physical memory plus this process's own mapping of it. Cheap to clone.
///
/// Dropping the last clone unmaps the local view and releases the handle; windows
/// made from it keep the memory alive through their own mappings.
#[derive(Clone, Debug)]
pub struct Allocation {
    inner: Arc<AllocationInner>,
}

#[derive(Debug)]
struct AllocationInner {
    id: u64,
    size: usize,
    local: Box<dyn Span>,
    memory: Arc<dyn Memory>,
    /// The handle exported when the memory was made, until a rendezvous takes it;
    /// later rendezvous (of other groups) export again.
    ahead: Mutex<Option<ExportAhead>>,
    provider: Arc<dyn Provider>,
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
        let memory: Arc<dyn Memory> = Arc::from(provider.create(physical)?);
        // Exporting overlaps mapping and zeroing the local view, and whatever the
        // caller does before its rendezvous.
        let ahead = ExportAhead::start(Arc::clone(&memory));
        let mut local = provider.reserve(physical)?;
        local.map(0, memory.as_ref())?;
        if !info.zero_on_create {
            local.zero(0, physical)?;
        }
        Ok(Allocation {
            inner: Arc::new(AllocationInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                size,
                local,
                memory,
                ahead: Mutex::new(Some(ahead)),
                provider,
            }),
        })
    }

    /// Address of this process's view.
    pub fn ptr(&self) -> usize {
        self.inner.local.base()
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
        let ahead = self
            .inner
            .ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match ahead {
            Some(ahead) => ahead.wait(),
            None => self.inner.memory.export(),
        }
    }

    /// Offset of `ptr` inside this allocation's local view, if it is inside.
    pub fn offset_of(&self, ptr: usize) -> Option<usize> {
        let off = ptr.checked_sub(self.ptr())?;
        (off < self.inner.size).then_some(off)
    }
}
