//! Host memory objects: a sealed memfd region, the reserved span regions are mapped
//! over, and a table copied into host memory.

use std::os::fd::{AsFd, OwnedFd};

use rustix::mm::{MapFlags, ProtFlags};

use super::page_size;
use symmwin_device::error::{Error, Phase, Result};
use symmwin_device::provider::mapped::MappedRanges;
use symmwin_device::provider::{downcast, Memory, SharedHandle, Span, Table};

/// A sealed memfd region.
#[derive(Debug)]
pub struct HostMemory {
    pub(super) fd: OwnedFd,
    pub(super) len: usize,
}

impl Memory for HostMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn export(&self) -> Result<SharedHandle> {
        let dup = self
            .fd
            .try_clone()
            .map_err(|e| Error::os(Phase::Export, "dup", e))?;
        Ok(SharedHandle::Fd(dup))
    }
}

#[derive(Debug)]
pub struct HostSpan {
    pub(super) base: usize,
    pub(super) len: usize,
    /// Each region mapped over the reservation; the rest is PROT_NONE.
    pub(super) mapped: MappedRanges,
}

impl Span for HostSpan {
    fn base(&self) -> usize {
        self.base
    }

    fn len(&self) -> usize {
        self.len
    }

    fn map(&mut self, offset: usize, memory: &dyn Memory) -> Result<()> {
        let memory = downcast::<HostMemory>(memory)
            .ok_or_else(|| Error::invalid("host span can only map host memory"))?;
        let end = offset.checked_add(memory.len);
        if end.is_none_or(|end| end > self.len) {
            return Err(Error::invalid(format!(
                "mapping {} bytes at offset {offset} overruns a span of {}",
                memory.len, self.len
            )));
        }
        // SAFETY: the target range lies inside our own reservation (checked above), so
        // MAP_FIXED replaces only pages this span owns; the fd is a sealed memfd of
        // exactly `memory.len` bytes, so every mapped page is backed.
        unsafe {
            rustix::mm::mmap(
                (self.base + offset) as *mut _,
                memory.len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED,
                memory.fd.as_fd(),
                0,
            )
        }
        .map_err(|e| symmwin_device::limits::mmap_error(Phase::Map, "mmap(MAP_FIXED)", e))?;
        self.mapped.insert(offset, memory.len);
        Ok(())
    }

    fn zero(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::invalid("zero range overruns the span"));
        }
        // Writing a PROT_NONE page of the reservation would be a SIGSEGV.
        if !self.mapped.covers(offset, len) {
            return Err(Error::invalid(format!(
                "zero range {offset}..{} is not fully mapped",
                offset + len
            )));
        }
        let page = page_size();
        if offset % page == 0 && len % page == 0 && len > 0 {
            zero_pages(self.base + offset, len, page);
            return Ok(());
        }
        // SAFETY: the range is inside the span and mapped read/write (checked above).
        unsafe { std::ptr::write_bytes((self.base + offset) as *mut u8, 0, len) };
        Ok(())
    }
}

/// Zero whole pages of shared memfd mappings at `addr`: resident pages in place
/// (memset), the others by dropping them from the file (`MADV_REMOVE`).
///
/// The decision, measured on a 2-core x86-64 VM (Linux 6.18, 2026-12-01), zeroing a
/// resident range and then copying into it as the next user does:
///
/// | range | `MADV_REMOVE`, then copy | memset, then copy | `MADV_REMOVE` + `MADV_POPULATE_WRITE`, then copy |
/// | --- | --- | --- | --- |
/// | 4 MiB | 0.32 ms, 1.47 ms (2.8 GB/s) | 0.13 ms, 0.26 ms (16 GB/s) | 0.96 ms, 0.28 ms |
/// | 64 MiB | 5.6 ms, 59.5 ms (1.1 GB/s) | 3.1 ms, 9.1 ms (7.4 GB/s) | 35.3 ms, 5.3 ms |
/// | 256 MiB | 26.7 ms, 181 ms (1.5 GB/s) | 24.1 ms, 26.6 ms (10 GB/s) | 148 ms, 28.9 ms |
///
/// Dropping pages makes the next user fault every one in again (the copy runs at a
/// fifth of its speed, and the CPU ops and the demo measured faults); pre-faulting
/// them back costs more than zeroing in place. memset is the cheapest for pages that
/// are there, but would commit memory nobody touched (a bench window of 1 TiB of
/// which 3 bytes were written): so pages are checked with `mincore` first (about 1.6
/// ms per GiB of untouched range, nothing measurable for resident ones) and only
/// those not resident, whose zeroing by removal costs no fault later since nobody
/// used them, are dropped. Swapped-out pages count as not resident: dropping them is
/// correct too.
fn zero_pages(addr: usize, len: usize, page: usize) {
    const CHUNK_PAGES: usize = 1 << 16;
    let mut resident = vec![0u8; CHUNK_PAGES.min(len / page)];
    let mut at = 0;
    while at < len {
        let chunk = (len - at).min(CHUNK_PAGES * page);
        let pages = chunk / page;
        // SAFETY: the range is page-aligned, inside one span's mapped regions (checked
        // by the caller), and `resident` has room for one byte per page of it.
        let rc = unsafe { libc::mincore((addr + at) as *mut _, chunk, resident.as_mut_ptr()) };
        let mut first = 0;
        while first < pages {
            let in_memory = rc != 0 || resident[first] & 1 != 0;
            let run = resident[first..pages]
                .iter()
                .take_while(|&&r| rc != 0 || (r & 1 != 0) == in_memory)
                .count();
            let start = addr + at + first * page;
            zero_run(start, run * page, in_memory);
            first += run;
        }
        at += chunk;
    }
}

/// Zero `len` bytes of mapped memfd pages at `start`: in place when `in_memory`, else
/// by dropping them (memset if the kernel refuses).
fn zero_run(start: usize, len: usize, in_memory: bool) {
    if !in_memory {
        // SAFETY: the range is page-aligned shared memfd pages inside a span; only
        // their contents change (they read back as zeros in every mapping).
        let removed =
            unsafe { rustix::mm::madvise(start as *mut _, len, rustix::mm::Advice::LinuxRemove) };
        if removed.is_ok() {
            return;
        }
    }
    // SAFETY: the range is inside the span and mapped read/write (checked by `zero`).
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, len) };
}

impl Drop for HostSpan {
    fn drop(&mut self) {
        if symmwin_device::debug_free::enabled() {
            return self.quarantine();
        }
        // SAFETY: base/len is the reservation made in `reserve`; munmap of the whole
        // range removes the PROT_NONE pages and every MAP_FIXED region inside it.
        if let Err(e) = unsafe { rustix::mm::munmap(self.base as *mut _, self.len) } {
            tracing::error!("munmap of host span failed: {e}");
        }
    }
}

impl HostSpan {
    /// Release the pages but keep the range reserved with no access, so that any later
    /// access through a stale pointer faults, until the quarantine releases it after
    /// `SYMMWIN_DEBUG_FREE_KEEP` newer frees ([`symmwin_device::debug_free`]).
    fn quarantine(&mut self) {
        // SAFETY: base/len is our reservation; a fixed PROT_NONE anonymous mapping over
        // it replaces (and so unmaps) every region mapped inside, and nothing else of
        // this process lives there.
        let replaced = unsafe {
            rustix::mm::mmap_anonymous(
                self.base as *mut _,
                self.len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
            )
        };
        if let Err(e) = replaced {
            tracing::error!("quarantining a freed host span failed: {e}");
        }
        let (base, len) = (self.base, self.len);
        symmwin_device::debug_free::quarantine(Box::new(move || {
            // SAFETY: our PROT_NONE reservation from above, which nothing else uses;
            // released once, by the quarantine, after `keep()` newer frees.
            if let Err(e) = unsafe { rustix::mm::munmap(base as *mut _, len) } {
                tracing::error!("munmap of a quarantined host span failed: {e}");
            }
        }));
    }
}

#[derive(Debug)]
pub(super) struct HostTable(pub(super) Box<[u64]>);

impl Table for HostTable {
    fn ptr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}
