//! Mapping several allocations into a CUDA span with as few access grants as possible.
//!
//! `cuMemSetAccess` accepts any fully mapped range, even one made of several
//! allocations, so after mapping a window's slots (which sit side by side) one grant
//! covers each contiguous run instead of one grant per slot.

use super::{downcast, driver, CudaMemory, CudaSpan, Memory, PhaseExt};
use symmwin_device::error::{Error, Phase};

type MapResult = std::result::Result<(), (usize, Error)>;

impl CudaSpan {
    /// Map every `(offset, memory)`, then grant read/write access per contiguous run.
    /// On failure nothing this call mapped stays mapped.
    pub(super) fn map_batch(&mut self, items: &[(usize, &dyn Memory)]) -> MapResult {
        let mut planned: Vec<(usize, usize, usize, u64)> = Vec::with_capacity(items.len());
        for (i, &(offset, memory)) in items.iter().enumerate() {
            let memory = downcast::<CudaMemory>(memory)
                .ok_or_else(|| (i, Error::invalid("a CUDA span can only map CUDA memory")))?;
            self.check_free(offset, memory.len, &planned)
                .map_err(|e| (i, e))?;
            planned.push((offset, memory.len, i, memory.handle));
        }
        planned.sort_unstable_by_key(|&(offset, ..)| offset);
        // The guard borrows the context, not the span, which the end updates.
        let stream = std::sync::Arc::clone(&self.stream);
        let _guard = stream.ctx.enter().phase(Phase::Map).map_err(|e| (0, e))?;
        let mut done = 0;
        let mut failure = None;
        for &(offset, len, i, handle) in &planned {
            // SAFETY: the range lies in our reservation and is unmapped (check_free);
            // `len` is the allocation's full size.
            match unsafe { driver::mem_map(self.base + offset as u64, len, handle) } {
                Ok(()) => done += 1,
                Err(e) => {
                    failure = Some((i, e.at(Phase::Map)));
                    break;
                }
            }
        }
        if failure.is_none() {
            failure = self.grant_runs(&planned).err();
        }
        if let Some(failure) = failure {
            for &(offset, len, ..) in &planned[..done] {
                // SAFETY: undoes a mapping made above; nothing has used it yet.
                if let Err(e) = unsafe { driver::mem_unmap(self.base + offset as u64, len) } {
                    tracing::error!("cuMemUnmap after a failed map: {}", e.name());
                }
            }
            return Err(failure);
        }
        for &(offset, len, ..) in &planned {
            self.mapped.insert(offset, len);
        }
        Ok(())
    }

    /// One `cuMemSetAccess` per run of adjacent mappings in `planned` (sorted).
    fn grant_runs(&self, planned: &[(usize, usize, usize, u64)]) -> MapResult {
        let mut k = 0;
        while k < planned.len() {
            let (start, _, first, _) = planned[k];
            let mut end = start;
            while k < planned.len() && planned[k].0 == end {
                end += planned[k].1;
                k += 1;
            }
            // SAFETY: [start, end) was just mapped, allocation after allocation.
            unsafe {
                driver::mem_set_access_rw(self.base + start as u64, end - start, self.ctx().ordinal)
            }
            .map_err(|e| (first, e.at(Phase::Map)))?;
        }
        Ok(())
    }

    /// `[offset, offset + len)` is granular, inside the span, and overlaps neither a
    /// mapping nor a range `planned` in the same batch.
    fn check_free(
        &self,
        offset: usize,
        len: usize,
        planned: &[(usize, usize, usize, u64)],
    ) -> symmwin_device::Result<()> {
        let end = offset.checked_add(len);
        if offset % self.granularity != 0 || end.is_none_or(|end| end > self.len) {
            return Err(Error::invalid(format!(
                "mapping {len} bytes at offset {offset} into a span of {} (granularity {})",
                self.len, self.granularity
            )));
        }
        let overlaps =
            |&(start, size): &(usize, usize)| start < offset + len && offset < start + size;
        if self.mapped.overlaps(offset, len)
            || planned
                .iter()
                .map(|&(o, l, ..)| (o, l))
                .any(|r| overlaps(&r))
        {
            return Err(Error::invalid(format!(
                "offset {offset} of the span is already mapped"
            )));
        }
        Ok(())
    }
}
