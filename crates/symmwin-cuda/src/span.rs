//! A reserved device virtual range and the mappings made into it.

use std::sync::Arc;

use cudarc::driver::sys;

use super::context::PrimaryContext;
use super::driver::{self, PhaseExt};
use super::stream::PrivateStream;
use symmwin_device::error::{Error, Phase, Result};
use symmwin_device::provider::mapped::MappedRanges;
use symmwin_device::provider::{Memory, Span};

/// A reserved device virtual range with the mappings made into it.
#[derive(Debug)]
pub struct CudaSpan {
    pub(super) stream: Arc<PrivateStream>,
    pub(super) base: sys::CUdeviceptr,
    pub(super) len: usize,
    pub(super) granularity: usize,
    /// Each mapping, non-overlapping.
    pub(super) mapped: MappedRanges,
}

impl CudaSpan {
    pub(super) fn ctx(&self) -> &PrimaryContext {
        &self.stream.ctx
    }

    /// Whether `[offset, offset + len)` is entirely mapped.
    pub(super) fn is_mapped(&self, offset: usize, len: usize) -> bool {
        self.mapped.covers(offset, len)
    }
}

impl Span for CudaSpan {
    fn base(&self) -> usize {
        self.base as usize
    }

    fn len(&self) -> usize {
        self.len
    }

    fn map(&mut self, offset: usize, memory: &dyn Memory) -> Result<()> {
        self.map_batch(&[(offset, memory)]).map_err(|(_, e)| e)
    }

    fn map_all(
        &mut self,
        items: &[(usize, &dyn Memory)],
    ) -> std::result::Result<(), (usize, Error)> {
        self.map_batch(items)
    }

    /// Runs on a private non-blocking stream and waits for it, so it neither waits for
    /// nor is ordered after torch's streams: the range must not be in use.
    fn zero(&self, offset: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::invalid("zero range overruns the span"));
        }
        // A memset of an unmapped address is a device fault that kills the context.
        if !self.is_mapped(offset, len) {
            return Err(Error::invalid(format!(
                "zero range {offset}..{} is not fully mapped",
                offset + len
            )));
        }
        let _guard = self.ctx().enter().phase(Phase::Map)?;
        // SAFETY: the range is mapped with read/write access for this device and stays
        // so until we return, because the span (and so the mapping) is borrowed.
        unsafe { driver::memset_d8_async(self.base + offset as u64, 0, len, self.stream.raw) }
            .phase(Phase::Map)?;
        self.stream.synchronize().phase(Phase::Map)
    }
}

impl Drop for CudaSpan {
    /// The owner must make sure no device work still uses the span.
    fn drop(&mut self) {
        let guard = match self.ctx().enter() {
            Ok(guard) => guard,
            Err(e) => {
                tracing::error!("cannot tear down a CUDA span: {}", e.name());
                return;
            }
        };
        let mut clean = true;
        for (offset, len) in self.mapped.iter() {
            // SAFETY: exactly one mapping made by `map`, no longer in use (see above).
            if let Err(e) = unsafe { driver::mem_unmap(self.base + offset as u64, len) } {
                tracing::error!("cuMemUnmap failed: {}", e.name());
                clean = false;
            }
        }
        // Freeing a range that still holds a mapping is refused by the driver anyway;
        // leaking the address range is the lesser evil. In the use-after-free debug mode
        // the range stays reserved with nothing mapped for the next
        // SYMMWIN_DEBUG_FREE_KEEP frees, so a stale pointer faults (an illegal address)
        // instead of reaching a later allocation.
        if clean {
            let (base, len) = (self.base, self.len);
            let free = move || {
                // SAFETY: the whole reservation, with nothing mapped in it, freed once.
                if let Err(e) = unsafe { driver::mem_address_free(base, len) } {
                    tracing::error!("cuMemAddressFree failed: {}", e.name());
                }
            };
            if symmwin_device::debug_free::enabled() {
                // Freed after SYMMWIN_DEBUG_FREE_KEEP newer spans, by the drop of the
                // newest, while its context is current (this guard).
                symmwin_device::debug_free::quarantine(Box::new(free));
            } else {
                free();
            }
        }
        drop(guard);
    }
}
