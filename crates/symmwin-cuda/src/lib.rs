//! symmwin-cuda: symmwin's CUDA backend, for the `symmwin` runtime (its default
//! `cuda` feature); the only crate of symmwin that calls the CUDA driver and NVML.
//!
//! CUDA device memory through the driver's virtual memory management (VMM) API, the
//! signal and op kernels (`kernels/`, PTX committed beside their sources) and the
//! record a trapped device wait leaves. It implements the contract of
//! `symmwin-device` and depends on nothing else of symmwin.
//!
//! libcuda is loaded at run time through `cudarc`'s `sys` layer, so a machine without
//! a driver gets [`ErrorKind::NoDriver`] instead of a link or load failure. `driver`
//! holds the only `unsafe` FFI calls; the types here own the driver objects and free
//! them on drop. Every object holds the device's retained primary context — the same
//! context torch uses — and makes it current only for the duration of each call.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys;

use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::mapped::MappedRanges;
use symmwin_device::provider::HandlePreference;
use symmwin_device::provider::{
    downcast, HandleType, Memory, Provider, ProviderInfo, ProviderKind, SharedHandle, Signals,
    Span, Table,
};

mod context;
mod driver;
mod exit_marks;
mod fabric_domain;
mod kernel_module;
mod map_batch;
mod memory;
mod nvml;
mod ops;
mod pinned;
mod probe;
mod signal_params;
mod signals;
mod span;
mod stream;
mod table;
#[cfg(test)]
mod tests;
mod timeout_record;
#[cfg(test)]
mod timeout_tests;

use context::PrimaryContext;
use driver::PhaseExt;
use fabric_domain::CachedFabricDomain;
pub use memory::CudaMemory;
pub use span::CudaSpan;
use stream::PrivateStream;
pub use table::CudaTable;

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
    /// (default [`DEFAULT_DEVICE_TIMEOUT`](symmwin_device::device_timeout::DEFAULT_DEVICE_TIMEOUT)); tests shorten it.
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
        let base = unsafe { driver::mem_address_reserve(len, self.granularity) }
            .phase(Phase::Map)
            .map_err(symmwin_device::debug_free::name_mode_in)?;
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

    fn ops(&self) -> &dyn symmwin_device::provider::device_ops::DeviceOps {
        &self.ops
    }

    /// Read from NVML once, and only for fabric handles (POSIX fds never leave the host).
    fn fabric_domain(&self) -> Option<symmwin_device::provider::FabricDomain> {
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
