//! CUDA device memory through the driver's virtual memory management (VMM) API.
//!
//! libcuda is loaded at run time through `cudarc`'s `sys` layer, so a machine without
//! a driver gets [`ErrorKind::NoDriver`] instead of a link or load failure. `driver`
//! holds the only `unsafe` FFI calls; the types here own the driver objects and free
//! them on drop. Every object holds the device's retained primary context — the same
//! context torch uses — and makes it current only for the duration of each call.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys;

use super::mapped::MappedRanges;
use super::{
    downcast, HandleType, Memory, Provider, ProviderInfo, ProviderKind, SharedHandle, Signals,
    Span, Table,
};
use crate::config::HandlePreference;
use crate::error::{Error, ErrorKind, Phase, Result};

mod context;
mod driver;
mod fabric_domain;
mod map_batch;
mod nvml;
mod ops;
mod pinned;
mod probe;
mod signal_params;
mod signals;
mod timeout_record;
#[cfg(test)]
mod timeout_tests;

use context::PrimaryContext;
use driver::PhaseExt;
use fabric_domain::CachedFabricDomain;

pub use context::device_count;
pub use fabric_domain::{read_fabric_domain, FabricDomainProbe, NoFabricDomain};
pub use nvml::NvmlStatus;
pub use ops::CudaOps;
pub use probe::{peer_access, probe_device, DeviceReport, HandleSupport};
#[cfg(test)]
use signals::kernels_built;
pub use signals::CudaSignals;
pub use timeout_record::check_context;

/// The CUDA VMM provider for one device.
#[derive(Debug)]
pub struct CudaProvider {
    ctx: Arc<PrimaryContext>,
    handle_type: HandleType,
    granularity: usize,
    stream: Arc<PrivateStream>,
    signals: Arc<CudaSignals>,
    ops: CudaOps,
    fabric_domain: CachedFabricDomain,
}

impl CudaProvider {
    /// A provider for CUDA device `device`, sharing memory as `pref` asks.
    ///
    /// With [`HandlePreference::Auto`] the handle type is fabric when a real create +
    /// export works on this device and POSIX fd otherwise; a forced type that does not
    /// work is an [`ErrorKind::Unsupported`] error. The probe runs once per device per
    /// process.
    pub fn new(device: i32, pref: HandlePreference) -> Result<Self> {
        timeout_record::check_context()?;
        let ctx = Arc::new(PrimaryContext::retain(device)?);
        let vmm = driver::device_attribute(
            ctx.cu_device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        )
        .phase(Phase::Probe)?;
        if vmm == 0 {
            return Err(Error::new(
                Phase::Probe,
                ErrorKind::Unsupported(format!(
                    "CUDA device {device} does not support virtual memory management"
                )),
            ));
        }
        let handle_type = probe::choose_handle_type(&ctx, pref)?;
        let prop = driver::device_prop(device, probe::cu_handle_type(handle_type));
        let granularity = driver::allocation_granularity(
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
        .phase(Phase::Probe)?;
        let stream = Arc::new(PrivateStream::new(&ctx)?);
        tracing::debug!("CUDA device {device}: {handle_type} handles, granularity {granularity}");
        let signals = Arc::new(CudaSignals::new(Arc::clone(&ctx)));
        Ok(CudaProvider {
            ops: CudaOps::new(Arc::clone(&ctx), Arc::clone(&signals)),
            signals,
            ctx,
            handle_type,
            granularity,
            stream,
            fabric_domain: CachedFabricDomain::default(),
        })
    }

    /// The CUDA device ordinal.
    pub fn device(&self) -> i32 {
        self.ctx.ordinal
    }

    /// Fails with [`ErrorKind::ContextLost`] once a device-side wait of this process
    /// has timed out and trapped. Every provider call that touches the device checks it
    /// first, so the first symmwin call after the trap names the op, channel and peers.
    pub fn check_errors(&self) -> Result<()> {
        self.signals.check_errors()
    }

    /// The device-side wait used when a signal operation is given a zero timeout
    /// (default [`DEFAULT_OP_TIMEOUT`](signals::DEFAULT_OP_TIMEOUT)); tests shorten it.
    pub fn set_op_timeout(&self, timeout: Duration) {
        self.signals.set_default_timeout(timeout);
    }

    /// The provider's signal operations, with the CUDA-specific extras.
    pub fn cuda_signals(&self) -> &CudaSignals {
        &self.signals
    }

    fn check_granular(&self, size: usize, phase: Phase) -> Result<()> {
        if size == 0 || size % self.granularity != 0 {
            return Err(Error::new(
                phase,
                ErrorKind::InvalidArgument(format!(
                    "size {size} is not a positive multiple of the CUDA granularity {}",
                    self.granularity
                )),
            ));
        }
        Ok(())
    }
}

impl Provider for CudaProvider {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            kind: ProviderKind::Cuda,
            device: self.ctx.ordinal,
            handle_type: self.handle_type,
            granularity: self.granularity,
            zero_on_create: false,
        }
    }

    /// The memory is NOT zero-filled (`zero_on_create` is false): zeroing needs a
    /// mapping, and the caller maps it anyway, so it zeroes through [`Span::zero`] once
    /// mapped.
    fn create(&self, size: usize) -> Result<Box<dyn Memory>> {
        self.check_errors()?;
        self.check_granular(size, Phase::Create)?;
        let prop = driver::device_prop(self.ctx.ordinal, probe::cu_handle_type(self.handle_type));
        let _guard = self.ctx.enter().phase(Phase::Create)?;
        // SAFETY: `size` is a multiple of the recommended (hence minimum) granularity
        // for `prop`; CudaMemory releases the handle.
        let handle = unsafe { driver::mem_create(size, &prop) }.phase(Phase::Create)?;
        Ok(Box::new(CudaMemory {
            ctx: Arc::clone(&self.ctx),
            handle,
            len: size,
            handle_type: self.handle_type,
        }))
    }

    fn import(&self, handle: SharedHandle, size: usize) -> Result<Box<dyn Memory>> {
        self.check_errors()?;
        self.check_granular(size, Phase::Import)?;
        if handle.handle_type() != self.handle_type {
            return Err(Error::new(
                Phase::Import,
                ErrorKind::Unsupported(format!(
                    "this provider shares memory as {} handles, got a {} handle",
                    self.handle_type,
                    handle.handle_type()
                )),
            ));
        }
        let _guard = self.ctx.enter().phase(Phase::Import)?;
        let raw = match &handle {
            // SAFETY: our context is current; the fd stays open during the call and is
            // closed when `handle` drops below (the driver holds its own reference).
            SharedHandle::Fd(fd) => unsafe { driver::mem_import_fd(fd.as_fd()) },
            // SAFETY: our context is current; the driver only reads the 64 bytes.
            SharedHandle::Fabric(data) => unsafe { driver::mem_import_fabric(data) },
        }
        .phase(Phase::Import)?;
        drop(handle);
        // The driver cannot tell us the size of imported memory; a size larger than the
        // peer's allocation makes cuMemMap fail, never maps past it.
        Ok(Box::new(CudaMemory {
            ctx: Arc::clone(&self.ctx),
            handle: raw,
            len: size,
            handle_type: self.handle_type,
        }))
    }

    fn reserve(&self, len: usize) -> Result<Box<dyn Span>> {
        self.check_errors()?;
        self.check_granular(len, Phase::Map)?;
        let _guard = self.ctx.enter().phase(Phase::Map)?;
        // SAFETY: our context is current; CudaSpan frees the range.
        let base =
            unsafe { driver::mem_address_reserve(len, self.granularity) }.phase(Phase::Map)?;
        Ok(Box::new(CudaSpan {
            stream: Arc::clone(&self.stream),
            base,
            len,
            granularity: self.granularity,
            mapped: MappedRanges::default(),
        }))
    }

    fn upload(&self, words: &[u64]) -> Result<Box<dyn Table>> {
        self.check_errors()?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let _guard = self.ctx.enter().phase(Phase::Map)?;
        // cuMemAlloc refuses zero bytes; an empty table still needs a valid address.
        // SAFETY: our context is current; CudaTable frees the allocation.
        let ptr = unsafe { driver::mem_alloc(bytes.len().max(8)) }.phase(Phase::Map)?;
        let table = CudaTable {
            ctx: Arc::clone(&self.ctx),
            ptr,
        };
        if !bytes.is_empty() {
            // The private stream is non-blocking, so the copy must be complete before any
            // kernel on any stream can be handed the pointer: synchronise here.
            // SAFETY: the allocation holds `bytes.len()` bytes; `bytes` outlives the
            // synchronisation below.
            unsafe { driver::memcpy_htod_async(ptr, &bytes, self.stream.raw) }.phase(Phase::Map)?;
            self.stream.synchronize().phase(Phase::Map)?;
        }
        Ok(Box::new(table))
    }

    fn signals(&self) -> &dyn Signals {
        &*self.signals
    }

    fn ops(&self) -> &dyn crate::provider::device_ops::DeviceOps {
        &self.ops
    }

    /// Read from NVML once, and only for fabric handles (POSIX fds never leave the host).
    fn fabric_domain(&self) -> Option<crate::provider::FabricDomain> {
        self.fabric_domain.get(self.ctx.ordinal, self.handle_type)
    }

    /// Runs on the provider's private non-blocking stream: it is not ordered after work
    /// on torch's streams, so the caller must make sure none is using the ranges.
    unsafe fn copy(&self, dst: usize, src: usize, len: usize) -> Result<()> {
        self.check_errors()?;
        if len == 0 {
            return Ok(());
        }
        let _guard = self.ctx.enter().phase(Phase::Map)?;
        // SAFETY: the caller guarantees both ranges are live mappings of this provider;
        // we wait for the copy before returning.
        unsafe { driver::memcpy_dtod_async(dst as u64, src as u64, len, self.stream.raw) }
            .phase(Phase::Map)?;
        self.stream.synchronize().phase(Phase::Map)
    }

    /// Ordered like [`Provider::copy`].
    unsafe fn write(&self, dst: usize, bytes: &[u8]) -> Result<()> {
        self.check_errors()?;
        if bytes.is_empty() {
            return Ok(());
        }
        let _guard = self.ctx.enter().phase(Phase::Map)?;
        // SAFETY: the caller guarantees the destination is a live mapping; `bytes`
        // outlives the synchronisation below.
        unsafe { driver::memcpy_htod_async(dst as u64, bytes, self.stream.raw) }
            .phase(Phase::Map)?;
        self.stream.synchronize().phase(Phase::Map)
    }

    /// Ordered like [`Provider::copy`].
    unsafe fn read(&self, src: usize, bytes: &mut [u8]) -> Result<()> {
        self.check_errors()?;
        if bytes.is_empty() {
            return Ok(());
        }
        let _guard = self.ctx.enter().phase(Phase::Map)?;
        // SAFETY: the caller guarantees the source is a live mapping; `bytes` is not
        // touched until the synchronisation below.
        unsafe { driver::memcpy_dtoh_async(bytes, src as u64, self.stream.raw) }
            .phase(Phase::Map)?;
        self.stream.synchronize().phase(Phase::Map)
    }
}

/// Physical device memory (created here or imported from a peer). Released on drop;
/// mappings of it stay valid until they are unmapped.
#[derive(Debug)]
pub struct CudaMemory {
    ctx: Arc<PrimaryContext>,
    handle: sys::CUmemGenericAllocationHandle,
    len: usize,
    handle_type: HandleType,
}

impl Memory for CudaMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn export(&self) -> Result<SharedHandle> {
        let _guard = self.ctx.enter().phase(Phase::Export)?;
        match self.handle_type {
            HandleType::PosixFd => {
                // SAFETY: the handle is live and carries the POSIX fd handle type.
                let fd = unsafe { driver::mem_export_fd(self.handle) }.phase(Phase::Export)?;
                // The driver's fd would otherwise leak into every child process.
                rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
                    .map_err(|e| Error::os(Phase::Export, "fcntl(F_SETFD)", e))?;
                Ok(SharedHandle::Fd(fd))
            }
            // SAFETY: the handle is live and carries the fabric handle type.
            HandleType::Fabric => unsafe { driver::mem_export_fabric(self.handle) }
                .map(SharedHandle::Fabric)
                .phase(Phase::Export),
        }
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and not used again; mappings keep the physical
        // memory alive on their own.
        let release = || unsafe { driver::mem_release(self.handle) };
        self.ctx
            .release_in_drop(tracing::Level::ERROR, "cuMemRelease", release);
    }
}

/// A reserved device virtual range with the mappings made into it.
#[derive(Debug)]
pub struct CudaSpan {
    stream: Arc<PrivateStream>,
    base: sys::CUdeviceptr,
    len: usize,
    granularity: usize,
    /// Each mapping, non-overlapping.
    mapped: MappedRanges,
}

impl CudaSpan {
    fn ctx(&self) -> &PrimaryContext {
        &self.stream.ctx
    }

    /// Whether `[offset, offset + len)` is entirely mapped.
    fn is_mapped(&self, offset: usize, len: usize) -> bool {
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
        // leaking the address range is the lesser evil.
        if clean {
            // SAFETY: the whole reservation, now with nothing mapped in it.
            if let Err(e) = unsafe { driver::mem_address_free(self.base, self.len) } {
                tracing::error!("cuMemAddressFree failed: {}", e.name());
            }
        }
        drop(guard);
    }
}

/// A small device allocation holding a copy of host words.
#[derive(Debug)]
pub struct CudaTable {
    ctx: Arc<PrimaryContext>,
    ptr: sys::CUdeviceptr,
}

impl Table for CudaTable {
    fn ptr(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for CudaTable {
    fn drop(&mut self) {
        // SAFETY: the allocation is ours and its users are gone with the table.
        let free = || unsafe { driver::mem_free(self.ptr) };
        self.ctx
            .release_in_drop(tracing::Level::ERROR, "cuMemFree", free);
    }
}

/// A non-blocking stream for the provider's own copies and memsets.
#[derive(Debug)]
struct PrivateStream {
    ctx: Arc<PrimaryContext>,
    raw: sys::CUstream,
}

// SAFETY: a CUstream may be used from any thread; the handle is immutable.
unsafe impl Send for PrivateStream {}
// SAFETY: as above; the driver serialises concurrent submissions to one stream.
unsafe impl Sync for PrivateStream {}

impl PrivateStream {
    fn new(ctx: &Arc<PrimaryContext>) -> Result<Self> {
        let _guard = ctx.enter().phase(Phase::Probe)?;
        // Non-blocking: the legacy default stream would make every zeroing wait for
        // (and be waited on by) all work on torch's blocking streams.
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint;
        // SAFETY: our context is current; Drop destroys the stream in it.
        let raw = unsafe { driver::stream_create(flags) }.phase(Phase::Probe)?;
        Ok(PrivateStream {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    fn synchronize(&self) -> driver::DriverResult<()> {
        // SAFETY: the stream is live; its context is current in every caller.
        unsafe { driver::stream_synchronize(self.raw) }
    }
}

impl Drop for PrivateStream {
    fn drop(&mut self) {
        // SAFETY: the stream is ours and no span or provider uses it any more.
        let destroy = || unsafe { driver::stream_destroy(self.raw) };
        self.ctx
            .release_in_drop(tracing::Level::DEBUG, "cuStreamDestroy", destroy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{PadLayout, PadSignal, SignalAt};

    /// Device 0's provider, for the tests ignored without a GPU. The guard serialises
    /// GPU tests: one of them plays two ranks in one process, and a synchronising
    /// driver call from another test (cuMemFree waits for the whole device) between its
    /// two halves of a barrier would stall the first half until it times out.
    fn gpu() -> (std::sync::MutexGuard<'static, ()>, CudaProvider) {
        static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = GPU.lock().unwrap_or_else(|p| p.into_inner());
        let provider = CudaProvider::new(0, HandlePreference::Auto).unwrap_or_else(|e| {
            panic!("this test needs a CUDA GPU (run it with --ignored on one): {e}")
        });
        (guard, provider)
    }

    /// Without a driver every entry point says so; with one, a device that does not
    /// exist is an invalid argument. Neither panics.
    #[test]
    fn missing_driver_is_an_error_not_a_panic() {
        let count = match device_count() {
            Ok(count) => count,
            Err(err) => {
                for err in [
                    err,
                    CudaProvider::new(0, HandlePreference::Auto)
                        .map(drop)
                        .unwrap_err(),
                    probe_device(0).map(drop).unwrap_err(),
                    peer_access(0, 1).map(drop).unwrap_err(),
                ] {
                    assert!(matches!(err.kind(), ErrorKind::NoDriver(_)), "{err}");
                }
                return;
            }
        };
        for err in [
            CudaProvider::new(count, HandlePreference::Auto)
                .map(drop)
                .unwrap_err(),
            probe_device(count).map(drop).unwrap_err(),
            probe_device(-1).map(drop).unwrap_err(),
            peer_access(0, count).map(drop).unwrap_err(),
        ] {
            assert!(matches!(err.kind(), ErrorKind::InvalidArgument(_)), "{err}");
        }
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn span_coverage() {
        let (_gpu, provider) = gpu();
        let g = provider.granularity;
        let mut span = CudaSpan {
            stream: Arc::clone(&provider.stream),
            base: 0,
            len: 8 * g,
            granularity: g,
            mapped: [(0, 2 * g), (2 * g, g), (5 * g, g)].into_iter().fold(
                MappedRanges::default(),
                |mut m, (o, l)| {
                    m.insert(o, l);
                    m
                },
            ),
        };
        assert!(span.is_mapped(0, 3 * g));
        assert!(span.is_mapped(g, 2 * g));
        assert!(!span.is_mapped(0, 4 * g));
        assert!(span.is_mapped(5 * g, g));
        assert!(!span.is_mapped(4 * g, 2 * g));
        // Never handed to the driver: forget the fake mappings before drop.
        span.mapped.clear();
        span.len = 0;
        std::mem::forget(span);
    }

    fn read(span: &dyn Span, offset: usize, len: usize, provider: &CudaProvider) -> Vec<u8> {
        let mut out = vec![0xAB; len];
        // SAFETY: the range is mapped in a live span.
        unsafe { provider.read(span.base() + offset, &mut out) }.unwrap();
        out
    }

    fn sync(provider: &CudaProvider) {
        let _guard = provider.ctx.enter().unwrap();
        driver::ctx_synchronize().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn probe_reports_a_device() {
        let _gpu = gpu();
        let report = probe_device(0).unwrap();
        assert!(report.vmm_supported && report.posix_fd.works, "{report:?}");
        assert!(report.granularity_min > 0);
        assert!(report.granularity_recommended % report.granularity_min == 0);
        println!("{}", serde_json::to_string(&report).unwrap());
        assert!(peer_access(0, 0).unwrap());
        let bad = probe_device(device_count().unwrap()).unwrap_err();
        assert!(matches!(bad.kind(), ErrorKind::InvalidArgument(_)), "{bad}");
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn forced_handle_types() {
        let _gpu = gpu();
        let fd = CudaProvider::new(0, HandlePreference::Fd).unwrap();
        assert_eq!(fd.info().handle_type, HandleType::PosixFd);
        match CudaProvider::new(0, HandlePreference::Fabric) {
            Ok(p) => assert_eq!(p.info().handle_type, HandleType::Fabric),
            Err(e) => {
                println!("fabric: {e}");
                assert!(matches!(e.kind(), ErrorKind::Unsupported(_)), "{e}");
            }
        }
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn create_export_import_map_zero_upload() {
        let (_gpu, provider) = gpu();
        let info = provider.info();
        let g = info.granularity;
        println!("{info:?}");
        assert!(provider.create(g + 1).is_err());
        let mine = provider.create(2 * g).unwrap();
        let theirs = provider.import(mine.export().unwrap(), 2 * g).unwrap();
        let mut span = provider.reserve(4 * g).unwrap();
        span.map(0, mine.as_ref()).unwrap();
        span.map(2 * g, theirs.as_ref()).unwrap();
        assert!(span.map(g, theirs.as_ref()).is_err(), "overlapping map");
        drop((mine, theirs)); // mappings keep the memory alive
                              // Both mappings alias one allocation: write through one, read through the other.
        let base = span.base();
        // SAFETY: every range below lies in the span's two live mappings.
        unsafe {
            provider.write(base + 100, b"hello").unwrap();
            provider.copy(base + g, base + 100, 5).unwrap();
        }
        assert_eq!(read(span.as_ref(), 2 * g + g, 5, &provider), b"hello");
        span.zero(0, 2 * g).unwrap();
        assert!(read(span.as_ref(), 2 * g, 2 * g, &provider)
            .iter()
            .all(|&b| b == 0));
        assert!(span.zero(3 * g, 2 * g).is_err(), "zero past the span");

        let words = [1u64, u64::MAX, 0x1234_5678_9abc_def0];
        let table = provider.upload(&words).unwrap();
        let mut back = [0u8; 24];
        // SAFETY: the table holds 24 bytes.
        unsafe { provider.read(table.ptr(), &mut back) }.unwrap();
        let expect: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&back[..], &expect[..]);
        assert_ne!(provider.upload(&[]).unwrap().ptr(), 0);
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn signals_on_device() {
        let (_gpu, provider) = gpu();
        let ranks = super::timeout_tests::TwoRanks::on(provider);
        let (provider, g) = (&ranks.provider, ranks.pad);
        let pads = |rank| ranks.pads(rank);
        let signals = provider.signals();
        let second = Duration::from_secs(1);
        if !kernels_built() {
            let err = signals
                .signal(&pads(0), PadSignal::Put(1), SignalAt::new(0, second, 0))
                .unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Unsupported(_)), "{err}");
            return;
        }
        // Put then wait, in order on the legacy stream.
        signals
            .signal(&pads(0), PadSignal::Put(1), SignalAt::new(3, second, 0))
            .unwrap();
        signals
            .signal(&pads(1), PadSignal::Wait(0), SignalAt::new(3, second, 0))
            .unwrap();
        sync(provider);
        provider.check_errors().unwrap();
        assert!(ranks.pads_are_zero());

        // Both halves of a barrier at once, on two streams.
        let a = PrivateStream::new(&provider.ctx).unwrap();
        let b = PrivateStream::new(&provider.ctx).unwrap();
        let rounds = 1000;
        let start = std::time::Instant::now();
        for channel in 0..rounds {
            for (rank, stream) in [(0, a.raw as usize), (1, b.raw as usize)] {
                let at = SignalAt::new(channel % 8, second, stream);
                signals.signal(&pads(rank), PadSignal::Barrier, at).unwrap();
            }
        }
        let per_launch = start.elapsed() / (2 * rounds as u32);
        sync(provider);
        println!("barrier launch: {per_launch:?} per call");
        provider.check_errors().unwrap();
        assert!(ranks.pads_are_zero());

        // A timeout traps and loses the context: timeout_tests.rs runs it in a
        // child process so the other tests keep theirs.

        // Bad arguments never reach the device.
        assert!(signals
            .signal(&pads(0), PadSignal::Put(2), SignalAt::new(0, second, 0))
            .is_err());
        assert!(signals
            .signal(&pads(0), PadSignal::Barrier, SignalAt::new(g, second, 0))
            .is_err());
        // World 1 needs no peers.
        let alone = PadLayout::from_parts(ranks.span.base(), g, g, 0, 1).unwrap();
        signals
            .signal(&alone, PadSignal::Barrier, SignalAt::new(0, second, 0))
            .unwrap();
    }
}
