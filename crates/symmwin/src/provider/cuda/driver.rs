//! Thin `unsafe` wrappers over `cudarc::driver::sys`: each calls exactly one driver
//! entry point and turns its status into a [`DriverError`]. Everything above this module
//! is safe RAII code.
//!
//! A failed call yields a small `Copy` value (entry point + status) rather than a full
//! [`Error`]: the phase is known only to the caller, and the launch path must not format
//! strings unless something actually failed.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{Error, ErrorKind, Phase, Result};

/// Every driver entry point this module calls, by the symbol name cudarc resolves.
/// cudarc panics on a missing symbol, so [`ensure_loaded`] checks them all up front.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuMemGetAllocationGranularity",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemsetD8Async",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuLaunchKernel",
];

/// A failed driver call: which entry point, and the status it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverError {
    /// The driver entry point, e.g. `cuMemCreate`.
    pub call: &'static str,
    /// The status it returned.
    pub code: sys::CUresult,
}

impl DriverError {
    /// The driver's name for the status, e.g. `CUDA_ERROR_NOT_PERMITTED`.
    pub fn name(&self) -> String {
        let mut ptr: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: cuGetErrorName only writes a pointer to a static string (or leaves it
        // null for an unknown code); it needs no context and works before cuInit.
        let status = unsafe { sys::cuGetErrorName(self.code, &mut ptr) };
        static_str(status, ptr).unwrap_or_else(|| format!("{:?}", self.code))
    }

    /// The driver's description of the status, with what to do where the driver's own
    /// words do not say it (see [`remedy`]).
    pub fn message(&self) -> String {
        let mut ptr: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: as in `name`.
        let status = unsafe { sys::cuGetErrorString(self.code, &mut ptr) };
        let text = static_str(status, ptr).unwrap_or_else(|| "unknown error".to_owned());
        match remedy(self.code) {
            Some(remedy) => format!("{text}; {remedy}"),
            None => text,
        }
    }

    /// The crate error for this failure during `phase`.
    pub fn at(self, phase: Phase) -> Error {
        Error::new(
            phase,
            ErrorKind::Driver {
                call: self.call,
                name: self.name(),
                message: self.message(),
            },
        )
    }
}

/// What the user must do about a status whose driver text names no remedy.
///
/// The kernels are committed as PTX ISA 9.0 (CUDA 13.0) and JIT-compiled by the driver
/// in `cuModuleLoadData`; an older driver refuses them with
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` ("compiled with an unsupported toolchain"),
/// which reads like a build problem on the user's side when it is the driver's age.
fn remedy(code: sys::CUresult) -> Option<&'static str> {
    match code {
        sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => Some(
            "symmwin's kernels are PTX ISA 9.0 (CUDA 13.0), which needs NVIDIA driver 580 \
             or newer: update the driver (nvidia-smi shows the installed one); no CUDA \
             toolkit is needed",
        ),
        _ => None,
    }
}

fn static_str(status: sys::CUresult, ptr: *const std::ffi::c_char) -> Option<String> {
    if status != sys::CUresult::CUDA_SUCCESS || ptr.is_null() {
        return None;
    }
    // SAFETY: on success the driver returned a pointer to a NUL-terminated string with
    // static lifetime inside libcuda.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Result of one driver call.
pub type DriverResult<T> = std::result::Result<T, DriverError>;

/// Attaches the protocol phase to a driver failure.
pub trait PhaseExt<T> {
    /// The crate result, with a failure attributed to `phase`.
    fn phase(self, phase: Phase) -> Result<T>;
}

impl<T> PhaseExt<T> for DriverResult<T> {
    fn phase(self, phase: Phase) -> Result<T> {
        self.map_err(|e| e.at(phase))
    }
}

#[inline]
fn check(call: &'static str, code: sys::CUresult) -> DriverResult<()> {
    if code == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, code })
    }
}

/// Why the driver cannot be used in this process; cached, so rebuilt on every request.
#[derive(Debug, Clone)]
enum InitFailure {
    NoDriver(String),
    Driver(DriverError),
}

/// Loads libcuda, checks it exports everything we call, and runs `cuInit(0)`, once per
/// process. A machine without a driver gets [`ErrorKind::NoDriver`], never a panic.
pub fn ensure_loaded() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), InitFailure>> = OnceLock::new();
    match INIT.get_or_init(load_and_init) {
        Ok(()) => Ok(()),
        Err(InitFailure::NoDriver(why)) => {
            Err(Error::new(Phase::Probe, ErrorKind::NoDriver(why.clone())))
        }
        Err(InitFailure::Driver(e)) => Err(e.at(Phase::Probe)),
    }
}

fn load_and_init() -> std::result::Result<(), InitFailure> {
    // SAFETY: dlopen runs libcuda's initialisers, vendor code we must trust to use the
    // driver at all; the probe handle is closed again before returning.
    if !unsafe { sys::is_culib_present() } {
        return Err(InitFailure::NoDriver(
            "libcuda.so could not be loaded (no NVIDIA driver on this machine?)".into(),
        ));
    }
    // cudarc's loader panics if the library vanished between the two dlopens; that is
    // the only way it can fail here, so turn it into an error instead.
    // SAFETY: as above; the library is kept loaded for the life of the process.
    let lib = std::panic::catch_unwind(|| unsafe { sys::culib() })
        .map_err(|_| InitFailure::NoDriver("libcuda.so could not be loaded".into()))?;
    for name in SYMBOLS {
        // SAFETY: only the symbol's presence is tested; the pointer is never called or
        // dereferenced through this type.
        if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
            return Err(InitFailure::NoDriver(format!(
                "libcuda.so lacks {name}; the NVIDIA driver is too old"
            )));
        }
    }
    // SAFETY: cuInit takes no pointers and may be called any number of times.
    match check("cuInit", unsafe { sys::cuInit(0) }) {
        Ok(()) => Ok(()),
        Err(e) if e.code == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(InitFailure::NoDriver(
            "the CUDA driver reports no device".into(),
        )),
        Err(e) => Err(InitFailure::Driver(e)),
    }
}

/// A current-context switch undone on drop, so callers that had another context current
/// (a different device under torch) get it back.
/// The lifetime ties the guard to whatever keeps the context alive.
#[must_use]
pub struct CtxGuard<'a> {
    previous: Option<sys::CUcontext>,
    _ctx: PhantomData<&'a ()>,
}

impl CtxGuard<'_> {
    /// Makes `ctx` current on this thread until the guard drops.
    ///
    /// # Safety
    /// `ctx` must be a live context (e.g. a retained primary context) that outlives the
    /// guard.
    #[inline]
    pub unsafe fn enter<'a>(ctx: sys::CUcontext) -> DriverResult<CtxGuard<'a>> {
        // SAFETY: the caller guarantees `ctx` is live.
        let current = unsafe { ctx_get_current() }?;
        if current == ctx {
            return Ok(CtxGuard {
                previous: None,
                _ctx: PhantomData,
            });
        }
        // SAFETY: as above.
        unsafe { ctx_set_current(ctx) }?;
        Ok(CtxGuard {
            previous: Some(current),
            _ctx: PhantomData,
        })
    }
}

impl Drop for CtxGuard<'_> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: `previous` was current on this thread a moment ago (or null, which
            // unbinds); restoring it leaves the thread as the caller had it.
            if let Err(e) = unsafe { ctx_set_current(previous) } {
                tracing::warn!("restoring the caller's CUDA context failed: {}", e.name());
            }
        }
    }
}

/// `cuDriverGetVersion`.
///
/// # Safety
/// [`ensure_loaded`] must have succeeded.
pub unsafe fn driver_version() -> DriverResult<i32> {
    let mut version: c_int = 0;
    // SAFETY: writes one int to a local.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    Ok(version)
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// [`ensure_loaded`] must have succeeded.
pub unsafe fn device_count() -> DriverResult<i32> {
    let mut count: c_int = 0;
    // SAFETY: writes one int to a local.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    Ok(count)
}

/// `cuDeviceGet`.
///
/// # Safety
/// [`ensure_loaded`] must have succeeded.
pub unsafe fn device_get(ordinal: i32) -> DriverResult<sys::CUdevice> {
    let mut device: sys::CUdevice = 0;
    // SAFETY: writes one device id to a local; a bad ordinal is reported as a status.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut device, ordinal)
    })?;
    Ok(device)
}

/// `cuDeviceGetName`.
///
/// # Safety
/// `device` must come from [`device_get`].
pub unsafe fn device_name(device: sys::CUdevice) -> DriverResult<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated, into `buf`.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device)
    })?;
    // SAFETY: the buffer is zero-initialised and the driver NUL-terminates within it,
    // so a terminator exists inside the array.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// `cuDeviceGetAttribute`.
///
/// # Safety
/// `device` must come from [`device_get`].
pub unsafe fn device_attribute(
    device: sys::CUdevice,
    attribute: sys::CUdevice_attribute,
) -> DriverResult<i32> {
    let mut value: c_int = 0;
    // SAFETY: writes one int to a local.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, attribute, device)
    })?;
    Ok(value)
}

/// `cuDeviceTotalMem`.
///
/// # Safety
/// `device` must come from [`device_get`].
pub unsafe fn device_total_mem(device: sys::CUdevice) -> DriverResult<usize> {
    let mut bytes: usize = 0;
    // SAFETY: writes one size to a local.
    check("cuDeviceTotalMem", unsafe {
        sys::cuDeviceTotalMem_v2(&mut bytes, device)
    })?;
    Ok(bytes)
}

/// `cuDeviceCanAccessPeer`.
///
/// # Safety
/// Both devices must come from [`device_get`].
pub unsafe fn device_can_access_peer(
    device: sys::CUdevice,
    peer: sys::CUdevice,
) -> DriverResult<bool> {
    let mut can: c_int = 0;
    // SAFETY: writes one int to a local.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, device, peer)
    })?;
    Ok(can != 0)
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `device` must come from [`device_get`]; every success must be paired with one
/// [`primary_ctx_release`].
pub unsafe fn primary_ctx_retain(device: sys::CUdevice) -> DriverResult<sys::CUcontext> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle to a local.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
    })?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease`.
///
/// # Safety
/// Must balance one successful [`primary_ctx_retain`] of `device`; nothing may use the
/// context through this reference afterwards.
pub unsafe fn primary_ctx_release(device: sys::CUdevice) -> DriverResult<()> {
    // SAFETY: the caller balances a retain.
    check("cuDevicePrimaryCtxRelease", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(device)
    })
}

/// `cuCtxGetCurrent`.
///
/// # Safety
/// [`ensure_loaded`] must have succeeded.
pub unsafe fn ctx_get_current() -> DriverResult<sys::CUcontext> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one handle to a local.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
    Ok(ctx)
}

/// `cuCtxSetCurrent`.
///
/// # Safety
/// `ctx` must be live or null.
pub unsafe fn ctx_set_current(ctx: sys::CUcontext) -> DriverResult<()> {
    // SAFETY: the caller guarantees `ctx` is live or null.
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// `cuCtxSynchronize`.
///
/// # Safety
/// A context must be current.
pub unsafe fn ctx_synchronize() -> DriverResult<()> {
    // SAFETY: takes no arguments; the caller made a context current.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}

/// `cuStreamCreate`.
///
/// # Safety
/// A context must be current; the stream must be destroyed with [`stream_destroy`]
/// before that context is released.
pub unsafe fn stream_create(flags: c_uint) -> DriverResult<sys::CUstream> {
    let mut stream: sys::CUstream = std::ptr::null_mut();
    // SAFETY: writes one handle to a local.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut stream, flags)
    })?;
    Ok(stream)
}

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` must come from [`stream_create`] and not be used afterwards.
pub unsafe fn stream_destroy(stream: sys::CUstream) -> DriverResult<()> {
    // SAFETY: the caller owns the stream.
    check("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream)
    })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `stream` must be live in the current context (null: the legacy default stream).
pub unsafe fn stream_synchronize(stream: sys::CUstream) -> DriverResult<()> {
    // SAFETY: the caller guarantees the stream is live.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream)
    })
}

/// `cuMemGetAllocationGranularity`.
///
/// # Safety
/// [`ensure_loaded`] must have succeeded.
pub unsafe fn allocation_granularity(
    prop: &sys::CUmemAllocationProp,
    option: sys::CUmemAllocationGranularity_flags,
) -> DriverResult<usize> {
    let mut granularity: usize = 0;
    // SAFETY: `prop` is a valid, fully initialised struct; one size is written.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(&mut granularity, prop, option)
    })?;
    Ok(granularity)
}

/// `cuMemCreate`.
///
/// # Safety
/// `size` must be a multiple of the granularity for `prop`; the handle must be released
/// with [`mem_release`].
pub unsafe fn mem_create(
    size: usize,
    prop: &sys::CUmemAllocationProp,
) -> DriverResult<sys::CUmemGenericAllocationHandle> {
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: `prop` is valid; one handle is written to a local.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut handle, size, prop, 0)
    })?;
    Ok(handle)
}

/// `cuMemRelease`.
///
/// # Safety
/// `handle` must be live and not used afterwards (mappings of it stay valid).
pub unsafe fn mem_release(handle: sys::CUmemGenericAllocationHandle) -> DriverResult<()> {
    // SAFETY: the caller owns the handle.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuMemExportToShareableHandle` for a POSIX file descriptor.
///
/// # Safety
/// `handle` must be live and created with the POSIX fd handle type requested.
pub unsafe fn mem_export_fd(handle: sys::CUmemGenericAllocationHandle) -> DriverResult<OwnedFd> {
    let mut fd: c_int = -1;
    // SAFETY: for POSIX_FILE_DESCRIPTOR the driver writes one int through the pointer.
    check("cuMemExportToShareableHandle", unsafe {
        sys::cuMemExportToShareableHandle(
            (&mut fd as *mut c_int).cast(),
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    })?;
    // SAFETY: on success the driver returns a new descriptor that the caller owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `cuMemExportToShareableHandle` for a fabric handle.
///
/// # Safety
/// `handle` must be live and created with the fabric handle type requested.
pub unsafe fn mem_export_fabric(
    handle: sys::CUmemGenericAllocationHandle,
) -> DriverResult<[u8; 64]> {
    let mut fabric = sys::CUmemFabricHandle { data: [0; 64] };
    // SAFETY: for FABRIC the driver writes one CUmemFabricHandle through the pointer.
    check("cuMemExportToShareableHandle", unsafe {
        sys::cuMemExportToShareableHandle(
            (&mut fabric as *mut sys::CUmemFabricHandle).cast(),
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
            0,
        )
    })?;
    Ok(fabric.data)
}

/// `cuMemImportFromShareableHandle` for a POSIX file descriptor. The driver does not
/// take ownership: the caller still closes `fd`.
///
/// # Safety
/// A context must be current; the handle must be released with [`mem_release`].
pub unsafe fn mem_import_fd(fd: BorrowedFd<'_>) -> DriverResult<sys::CUmemGenericAllocationHandle> {
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // The CUDA API takes the descriptor's value smuggled through the pointer argument.
    let os_handle = fd.as_raw_fd() as usize as *mut c_void;
    // SAFETY: for POSIX_FILE_DESCRIPTOR the pointer is not dereferenced; the driver only
    // reads the fd, which stays open for the duration of the call.
    check("cuMemImportFromShareableHandle", unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut handle,
            os_handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(handle)
}

/// `cuMemImportFromShareableHandle` for a fabric handle.
///
/// # Safety
/// A context must be current; the handle must be released with [`mem_release`].
pub unsafe fn mem_import_fabric(
    fabric: &[u8; 64],
) -> DriverResult<sys::CUmemGenericAllocationHandle> {
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    let mut data = sys::CUmemFabricHandle { data: *fabric };
    // SAFETY: for FABRIC the driver reads one CUmemFabricHandle through the pointer.
    check("cuMemImportFromShareableHandle", unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut handle,
            (&mut data as *mut sys::CUmemFabricHandle).cast(),
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
        )
    })?;
    Ok(handle)
}

/// `cuMemAddressReserve`.
///
/// # Safety
/// A context must be current; the range must be freed with [`mem_address_free`].
pub unsafe fn mem_address_reserve(size: usize, alignment: usize) -> DriverResult<sys::CUdeviceptr> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: writes one address to a local; no fixed address is requested.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut ptr, size, alignment, 0, 0)
    })?;
    Ok(ptr)
}

/// `cuMemAddressFree`.
///
/// # Safety
/// `ptr`/`size` must be a whole reservation with nothing mapped in it any more.
pub unsafe fn mem_address_free(ptr: sys::CUdeviceptr, size: usize) -> DriverResult<()> {
    // SAFETY: the caller guarantees the range is an unmapped reservation.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(ptr, size)
    })
}

/// `cuMemMap` of all of `handle` at `ptr`.
///
/// # Safety
/// `[ptr, ptr + size)` must lie in a live reservation and be unmapped; `size` must be the
/// allocation's size.
pub unsafe fn mem_map(
    ptr: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees the target range is reserved and free.
    check("cuMemMap", unsafe {
        sys::cuMemMap(ptr, size, 0, handle, 0)
    })
}

/// `cuMemUnmap`.
///
/// # Safety
/// `[ptr, ptr + size)` must be exactly one earlier [`mem_map`], with no work in flight
/// that still uses it.
pub unsafe fn mem_unmap(ptr: sys::CUdeviceptr, size: usize) -> DriverResult<()> {
    // SAFETY: the caller guarantees the range is one mapping no longer in use.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) })
}

/// `cuMemSetAccess`: read/write for `device` on `[ptr, ptr + size)`.
///
/// # Safety
/// The range must be mapped.
pub unsafe fn mem_set_access_rw(
    ptr: sys::CUdeviceptr,
    size: usize,
    device: i32,
) -> DriverResult<()> {
    let desc = sys::CUmemAccessDesc {
        location: device_location(device),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: one valid descriptor is read; the caller guarantees the range is mapped.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(ptr, size, &desc, 1)
    })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// `[ptr, ptr + n)` must be mapped and accessible to the stream's device, and stay so
/// until the stream has passed this operation.
pub unsafe fn memset_d8_async(
    ptr: sys::CUdeviceptr,
    value: u8,
    n: usize,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees the range and stream are valid.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, n, stream)
    })
}

/// `cuMemAlloc`.
///
/// # Safety
/// A context must be current; the memory must be freed with [`mem_free`].
pub unsafe fn mem_alloc(size: usize) -> DriverResult<sys::CUdeviceptr> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: writes one address to a local.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, size) })?;
    Ok(ptr)
}

/// `cuMemFree`.
///
/// # Safety
/// `ptr` must come from [`mem_alloc`] and not be used afterwards.
pub unsafe fn mem_free(ptr: sys::CUdeviceptr) -> DriverResult<()> {
    // SAFETY: the caller owns the allocation.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// `cuMemcpyHtoDAsync`.
///
/// # Safety
/// `dst` must hold `src.len()` bytes; `src` must stay alive and unchanged until the
/// stream has passed the copy.
pub unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: &[u8],
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both buffers for the copy's duration.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), stream)
    })
}

/// `cuMemcpyDtoHAsync`.
///
/// # Safety
/// `src` must hold `dst.len()` readable bytes; `dst` must stay alive and untouched until
/// the stream has passed the copy.
pub unsafe fn memcpy_dtoh_async(
    dst: &mut [u8],
    src: sys::CUdeviceptr,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both buffers for the copy's duration.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), stream)
    })
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// Both ranges must hold `len` accessible bytes until the stream has passed the copy.
pub unsafe fn memcpy_dtod_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    len: usize,
    stream: sys::CUstream,
) -> DriverResult<()> {
    // SAFETY: the caller guarantees both ranges for the copy's duration.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream)
    })
}

/// `cuMemHostAlloc`.
///
/// # Safety
/// A context must be current; the memory must be freed with [`mem_free_host`].
pub unsafe fn mem_host_alloc(size: usize, flags: c_uint) -> DriverResult<*mut c_void> {
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer to a local.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut ptr, size, flags)
    })?;
    Ok(ptr)
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `ptr` must come from [`mem_host_alloc`], with no device work still using it.
pub unsafe fn mem_free_host(ptr: *mut c_void) -> DriverResult<()> {
    // SAFETY: the caller owns the allocation.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) })
}

/// `cuMemHostGetDevicePointer`.
///
/// # Safety
/// `ptr` must come from [`mem_host_alloc`] with `CU_MEMHOSTALLOC_DEVICEMAP`.
pub unsafe fn mem_host_device_pointer(ptr: *mut c_void) -> DriverResult<sys::CUdeviceptr> {
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: writes one address to a local.
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut dptr, ptr, 0)
    })?;
    Ok(dptr)
}

/// `cuModuleLoadData` of NUL-terminated PTX text.
///
/// # Safety
/// A context must be current; the module must be unloaded with [`module_unload`] before
/// that context is released.
pub unsafe fn module_load_data(image: &CStr) -> DriverResult<sys::CUmodule> {
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: PTX images are read up to their NUL terminator, which `CStr` guarantees.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, image.as_ptr().cast())
    })?;
    Ok(module)
}

/// `cuModuleUnload`.
///
/// # Safety
/// `module` must be live, and no function from it may be launched afterwards.
pub unsafe fn module_unload(module: sys::CUmodule) -> DriverResult<()> {
    // SAFETY: the caller owns the module.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
}

/// `cuModuleGetFunction`.
///
/// # Safety
/// `module` must be live; the function is valid only while it is.
pub unsafe fn module_get_function(
    module: sys::CUmodule,
    name: &CStr,
) -> DriverResult<sys::CUfunction> {
    let mut function: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated; one handle is written to a local.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut function, module, name.as_ptr())
    })?;
    Ok(function)
}

/// `cuLaunchKernel` of a one-dimensional grid.
///
/// # Safety
/// A context owning `function` and `stream` must be current; `params` must point at one
/// value per kernel parameter, of exactly the parameter's type, and every address the
/// kernel dereferences must stay valid until the stream has run it.
#[inline]
pub unsafe fn launch_kernel(
    function: sys::CUfunction,
    grid: u32,
    block: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> DriverResult<()> {
    // SAFETY: the caller guarantees the parameter layout and the lifetime of everything
    // the kernel touches; the driver copies `params` before returning.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            function,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// A device as a memory location.
pub fn device_location(device: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device,
    }
}

/// Allocation properties for pinned device memory shareable as `handle_types`.
pub fn device_prop(
    device: i32,
    handle_types: sys::CUmemAllocationHandleType,
) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: handle_types,
        location: device_location(device),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_ptx_names_the_minimum_driver() {
        let remedy = remedy(sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            .expect("the PTX version error has a remedy");
        assert!(remedy.contains("driver 580 or newer"), "{remedy}");
        assert!(remedy.contains("PTX ISA 9.0"), "{remedy}");
    }

    #[test]
    fn other_statuses_keep_the_drivers_words_alone() {
        assert_eq!(remedy(sys::CUresult::CUDA_ERROR_NOT_PERMITTED), None);
    }

    #[test]
    fn remedy_states_the_ptx_version_that_is_committed() {
        for ptx in [
            include_str!("../../../kernels/signal.ptx"),
            include_str!("../../../kernels/ops.ptx"),
        ] {
            assert!(
                ptx.lines().any(|l| l.trim() == ".version 9.0"),
                "PTX version changed: update remedy()"
            );
        }
    }
}
