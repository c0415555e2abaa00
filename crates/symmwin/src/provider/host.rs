//! Host shared memory: memfd regions mapped with `MAP_FIXED` into a reserved
//! `PROT_NONE` span. The same protocol as CUDA VMM, on any Linux machine.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use super::mapped::MappedRanges;
use super::{
    downcast, HandleType, Memory, PadLayout, PadSignal, Provider, ProviderInfo, ProviderKind,
    SharedHandle, SignalAt, Signals, Span, Table,
};
use crate::error::{Error, ErrorKind, Phase, Result};

/// Seals every region carries: a peer can neither shrink (SIGBUS for us) nor grow it.
const REQUIRED_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// The host-memory provider.
#[derive(Debug, Default)]
pub struct HostProvider {
    signals: HostSignals,
    ops: crate::ops::host::HostOps,
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

/// A sealed memfd region.
#[derive(Debug)]
pub struct HostMemory {
    fd: OwnedFd,
    len: usize,
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
        .map_err(|e| crate::limits::mmap_error(Phase::Map, "mmap(reserve)", e))?;
        Ok(Box::new(HostSpan {
            base: base as usize,
            len,
            mapped: MappedRanges::default(),
        }))
    }

    fn upload(&self, words: &[u64]) -> Result<Box<dyn Table>> {
        Ok(Box::new(HostTable(words.to_vec().into_boxed_slice())))
    }

    fn signals(&self) -> &dyn super::Signals {
        &self.signals
    }

    fn ops(&self) -> &dyn crate::ops::DeviceOps {
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
#[derive(Debug)]
pub struct HostSpan {
    base: usize,
    len: usize,
    /// Each region mapped over the reservation; the rest is PROT_NONE.
    mapped: MappedRanges,
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
        .map_err(|e| crate::limits::mmap_error(Phase::Map, "mmap(MAP_FIXED)", e))?;
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
        if crate::debug_free::enabled() {
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
    /// Release the pages but keep the range reserved with no access, for good, so that
    /// any later access through a stale pointer faults ([`crate::debug_free`]).
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
    }
}

#[derive(Debug)]
struct HostTable(Box<[u64]>);

impl Table for HostTable {
    fn ptr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// Signals on host memory: the pads are plain shared memory, so CPU atomics suffice.
#[derive(Debug, Default)]
pub struct HostSignals;

/// The word for (`channel`, `src`) in `owner`'s pad, borrowed no longer than `pads`
/// (one signal call, during which the window calling us keeps its pads mapped).
fn pad_word(pads: &PadLayout, owner: usize, channel: usize, src: usize) -> Result<&AtomicU32> {
    let addr = pads.word(owner, channel, src)?;
    // SAFETY: the address lies inside a mapped pad (bounds checked by `word`) that
    // lives as long as the window calling us, which outlives this call and so the
    // borrow of `pads`; u32 words are 4-byte aligned; all access to pads goes through
    // atomics.
    Ok(unsafe { AtomicU32::from_ptr(addr as *mut u32) })
}

fn spin_until(
    word: &AtomicU32,
    from: u32,
    to: u32,
    order: Ordering,
    wait: HostWait,
) -> Result<bool> {
    wait_until(wait, || {
        word.compare_exchange_weak(from, to, order, Ordering::Relaxed)
            .is_ok()
    })
}

/// What a host wait waits for: until when, for which peer, and whose deaths it sees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostWait {
    pub(crate) deadline: Instant,
    pub(crate) peer: usize,
    pub(crate) peers: crate::peer_watch::PeerSet,
    /// The waiting rank, and what it waits in ("a barrier on channel 0").
    pub(crate) waiter: (usize, &'static str),
}

/// How often a host wait looks at its peer's death mark.
const DEATH_CHECK: Duration = Duration::from_millis(50);

/// Spin (yielding, then sleeping) until `done` or the deadline: `Ok(false)` on timeout,
/// an error naming the peer once it has ended without `done`. Ranks may outnumber
/// cores, so the wait gives the peer it waits for a chance to run. The death mark is
/// read before `done` is looked at once more, so a peer that did its part and then
/// ended fails nothing.
pub(crate) fn wait_until(wait: HostWait, mut done: impl FnMut() -> bool) -> Result<bool> {
    let mut spins = 0u32;
    let mut next_look = Instant::now() + DEATH_CHECK;
    let timeout = wait.deadline.saturating_duration_since(Instant::now());
    let mut waiting = crate::waiting::Waiting::new(Phase::Signal, wait.waiter.0, timeout);
    while !done() {
        spins += 1;
        if spins % 64 == 0 {
            let now = Instant::now();
            if now >= next_look {
                if let Some(gone) = wait.peers.exit_error(Phase::Signal, wait.peer) {
                    return if done() { Ok(true) } else { Err(gone) };
                }
                waiting.tick(|| format!("for rank {} in {}", wait.peer, wait.waiter.1))?;
                next_look = now + DEATH_CHECK;
            }
            if now >= wait.deadline {
                return Ok(false);
            }
            if spins < 4096 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(true)
}

/// A wait for `peer` that gave up after `timeout`.
pub(crate) fn timed_out(peer: usize, timeout: Duration) -> Error {
    Error::new(
        Phase::Signal,
        ErrorKind::Timeout {
            missing: vec![peer],
            waited: timeout,
        },
    )
    .with_peer(peer)
}

impl Signals for HostSignals {
    fn signal(&self, pads: &PadLayout, op: PadSignal, at: SignalAt) -> Result<()> {
        let SignalAt {
            channel, timeout, ..
        } = at;
        let deadline = Instant::now() + timeout;
        let flip = |flip: Flip| flip.run(pads, channel, (deadline, at.peers), timeout);
        let peers = || (0..pads.world()).filter(|&p| p != pads.rank());
        match op {
            PadSignal::Barrier => {
                peers().try_for_each(|peer| flip(Flip::Set(peer)))?;
                peers().try_for_each(|peer| flip(Flip::Take(peer)))
            }
            PadSignal::Put(dst) => flip(Flip::Set(dst)),
            PadSignal::Wait(src) => flip(Flip::Take(src)),
        }
    }
}

/// One pad word changed by this rank: its slot in a peer's pad set (CAS 0 -> 1 with
/// release), or the peer's slot in its own pad taken (CAS 1 -> 0 with acquire).
#[derive(Clone, Copy)]
enum Flip {
    Set(usize),
    Take(usize),
}

impl Flip {
    /// Flip the word by `deadline`, or time out naming the peer.
    fn run(
        self,
        pads: &PadLayout,
        channel: usize,
        until: (Instant, crate::peer_watch::PeerSet),
        timeout: Duration,
    ) -> Result<()> {
        let me = pads.rank();
        let (peer, owner, src, from, ordering) = match self {
            Flip::Set(dst) => (dst, dst, me, 0, Ordering::Release),
            Flip::Take(src) => (src, me, src, 1, Ordering::Acquire),
        };
        pads.check_peer(peer)?;
        let word = pad_word(pads, owner, channel, src)?;
        let (deadline, peers) = until;
        let wait = HostWait {
            deadline,
            peer,
            peers,
            waiter: (me, "a host signal wait"),
        };
        if spin_until(word, from, 1 - from, ordering, wait)? {
            Ok(())
        } else {
            Err(timed_out(peer, timeout))
        }
    }
}

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
