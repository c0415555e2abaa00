//! symmwin-host: symmwin's host-memory backend, for the `symmwin` runtime (which
//! always builds it) and for tests that need shared memory without a GPU.
//!
//! Host shared memory: memfd regions mapped with `MAP_FIXED` into a reserved
//! `PROT_NONE` span. The same protocol as CUDA VMM, on any Linux machine. It
//! implements the contract of `symmwin-device` and depends on nothing else of symmwin.
//!
//! As the CUDA provider is laid out: `memory` (regions, spans, tables),
//! `signals` (pad signals with CPU atomics) and `ops` (the collective ops as CPU
//! copies).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod memory;
mod ops;
pub mod poison_marks;
mod signals;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use memory::{HostMemory, HostSpan, HostTable};
pub use ops::{check_own_sends, mismatch_error, HostOps, Published};
pub use signals::HostSignals;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::mapped::MappedRanges;
use symmwin_device::provider::{
    HandleType, Memory, Provider, ProviderInfo, ProviderKind, SharedHandle, Span, Table,
};

/// Seals every region carries: a peer can neither shrink (SIGBUS for us) nor grow it.
const REQUIRED_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// The host-memory provider.
#[derive(Debug, Default)]
pub struct HostProvider {
    signals: HostSignals,
    ops: HostOps,
}

impl HostProvider {
    /// A provider for host shared memory.
    pub fn new() -> Self {
        HostProvider::default()
    }
}

/// Granularity of host regions: the page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

impl Provider for HostProvider {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            kind: ProviderKind::Host,
            device: -1,
            handle_type: HandleType::PosixFd,
            granularity: page_size(),
            // A new memfd reads as zeros.
            zero_on_create: true,
        }
    }

    fn create(&self, size: usize) -> Result<Box<dyn Memory>> {
        check_granular(size, Phase::Create)?;
        let fd =
            rustix::fs::memfd_create("symmwin", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .map_err(|e| Error::os(Phase::Create, "memfd_create", e))?;
        rustix::fs::ftruncate(&fd, size as u64)
            .map_err(|e| Error::os(Phase::Create, "ftruncate", e))?;
        rustix::fs::fcntl_add_seals(&fd, REQUIRED_SEALS)
            .map_err(|e| Error::os(Phase::Create, "fcntl(F_ADD_SEALS)", e))?;
        Ok(Box::new(HostMemory { fd, len: size }))
    }

    fn import(&self, handle: SharedHandle, size: usize) -> Result<Box<dyn Memory>> {
        let SharedHandle::Fd(fd) = handle else {
            return Err(Error::new(
                Phase::Import,
                ErrorKind::Unsupported("host memory is shared as file descriptors".into()),
            ));
        };
        // A peer's fd is only trusted as far as we can check it: it must be a sealed
        // memfd of exactly the agreed size, so mapping it can never fault.
        let seals = rustix::fs::fcntl_get_seals(&fd)
            .map_err(|e| Error::os(Phase::Import, "fcntl(F_GET_SEALS)", e))?;
        if seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE) {
            return Err(Error::new(
                Phase::Import,
                ErrorKind::Rejected(format!(
                    "the peer's memory is write-sealed (seals {seals:?}): it cannot be \
                     mapped writable, so it cannot be part of a window"
                )),
            ));
        }
        if !seals.contains(REQUIRED_SEALS) {
            return Err(Error::new(
                Phase::Import,
                ErrorKind::Rejected(format!(
                    "received fd is not a sealed memfd (seals {seals:?})"
                )),
            ));
        }
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::os(Phase::Import, "fstat", e))?;
        if stat.st_size as u64 != size as u64 {
            return Err(Error::new(
                Phase::Import,
                ErrorKind::Rejected(format!(
                    "received region is {} bytes, expected {size}",
                    stat.st_size
                )),
            ));
        }
        Ok(Box::new(HostMemory { fd, len: size }))
    }

    fn reserve(&self, len: usize) -> Result<Box<dyn Span>> {
        check_granular(len, Phase::Map)?;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel picks
        // aliases nothing; HostSpan owns it and unmaps it exactly once on drop.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| {
            symmwin_device::debug_free::name_mode_in(symmwin_device::limits::mmap_error(
                Phase::Map,
                "mmap(reserve)",
                e,
            ))
        })?;
        Ok(Box::new(HostSpan {
            base: base as usize,
            len,
            mapped: MappedRanges::default(),
        }))
    }

    fn upload(&self, words: &[u64]) -> Result<Box<dyn Table>> {
        Ok(Box::new(HostTable(words.to_vec().into_boxed_slice())))
    }

    fn signals(&self) -> &dyn symmwin_device::provider::Signals {
        &self.signals
    }

    fn ops(&self) -> &dyn symmwin_device::provider::device_ops::DeviceOps {
        &self.ops
    }

    unsafe fn copy(&self, dst: usize, src: usize, len: usize) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are mapped; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    unsafe fn write(&self, dst: usize, bytes: &[u8]) -> Result<()> {
        // SAFETY: the caller guarantees the destination is mapped; the source is a host slice.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
        Ok(())
    }

    unsafe fn read(&self, src: usize, bytes: &mut [u8]) -> Result<()> {
        // SAFETY: the caller guarantees the source is mapped; the destination is a host slice.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, bytes.as_mut_ptr(), bytes.len()) };
        Ok(())
    }
}

fn check_granular(size: usize, phase: Phase) -> Result<()> {
    if size == 0 || size % page_size() != 0 {
        return Err(Error::new(
            phase,
            ErrorKind::InvalidArgument(format!(
                "size {size} is not a positive multiple of the page size {}",
                page_size()
            )),
        ));
    }
    Ok(())
}

/// A reserved range; regions are mapped over it with `MAP_FIXED`.
#[cfg(test)]
mod tests {
    use super::*;

    /// Which of `pages` pages at `addr` are resident.
    fn resident(addr: usize, pages: usize) -> Vec<bool> {
        let mut v = vec![0u8; pages];
        // SAFETY: the range is a mapped span of `pages` pages; `v` has a byte per page.
        let rc = unsafe { libc::mincore(addr as *mut _, pages * page_size(), v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().map(|b| b & 1 != 0).collect()
    }

    #[test]
    fn zeroing_keeps_touched_pages_in_memory_and_commits_no_untouched_one() {
        let provider = HostProvider::new();
        let page = page_size();
        let memory = provider.create(8 * page).unwrap();
        let mut span = provider.reserve(8 * page).unwrap();
        span.map(0, memory.as_ref()).unwrap();
        let base = span.base();
        // Pages 1, 2 and 5 hold data; the others were never touched.
        for p in [1, 2, 5] {
            // SAFETY: page p of the mapped span.
            unsafe { std::ptr::write_bytes((base + p * page) as *mut u8, 0xAB, page) };
        }
        span.zero(0, 8 * page).unwrap();
        // Touched pages stay (the next write does not fault); untouched ones stay out.
        // (Checked before reading: a read faults a page in.)
        let expected: Vec<bool> = (0..8).map(|p| [1, 2, 5].contains(&p)).collect();
        assert_eq!(resident(base, 8), expected);
        // SAFETY: the span is mapped read/write, 8 pages long.
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, 8 * page) };
        assert!(bytes.iter().all(|&b| b == 0), "zeroed");
    }

    #[test]
    fn a_write_sealed_memfd_is_refused_naming_the_seal() {
        let fd = rustix::fs::memfd_create("peer", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        rustix::fs::fcntl_add_seals(&fd, REQUIRED_SEALS | SealFlags::WRITE).unwrap();
        let err = HostProvider::new()
            .import(SharedHandle::Fd(fd), 4096)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("write-sealed"), "{err}");
    }
}
