//! Virtual memory management (VMM): physical allocations and their shareable handles
//! (create, export, import, release), address reservations, mappings and access.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html>

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;

use super::init::require_loaded;
use super::{check, written, DriverResult};

/// Allocation properties for pinned device memory (`CUmemAllocationProp`), built only
/// by [`device_prop`]: its one pointer field, the Win32 metadata, is always null, so
/// the driver reads nothing through it.
#[derive(Clone, Copy)]
pub struct DeviceProp(sys::CUmemAllocationProp);

impl DeviceProp {
    fn as_raw(&self) -> &sys::CUmemAllocationProp {
        &self.0
    }
}

/// A device as a memory location.
pub fn device_location(device: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device,
    }
}

/// Allocation properties for pinned device memory shareable as `handle_types`.
pub fn device_prop(device: i32, handle_types: sys::CUmemAllocationHandleType) -> DeviceProp {
    DeviceProp(sys::CUmemAllocationProp {
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
    })
}

/// `cuMemGetAllocationGranularity`.
pub fn allocation_granularity(
    prop: &DeviceProp,
    option: sys::CUmemAllocationGranularity_flags,
) -> DriverResult<usize> {
    require_loaded("cuMemGetAllocationGranularity")?;
    written("cuMemGetAllocationGranularity", 0, |granularity| {
        // SAFETY: the library is loaded (checked above); `prop` is a fully initialised
        // struct whose only pointer is null (see `DeviceProp`); one size is written to a
        // local, and a device that does not exist is reported as a status.
        unsafe { sys::cuMemGetAllocationGranularity(granularity, prop.as_raw(), option) }
    })
}

/// `cuMemCreate`.
///
/// # Safety
/// `size` must be a multiple of the granularity for `prop`; the handle must be released
/// with [`mem_release`].
pub unsafe fn mem_create(
    size: usize,
    prop: &DeviceProp,
) -> DriverResult<sys::CUmemGenericAllocationHandle> {
    written("cuMemCreate", 0, |handle| {
        // SAFETY: `prop` is valid (see `DeviceProp`); one handle is written to a local.
        unsafe { sys::cuMemCreate(handle, size, prop.as_raw(), 0) }
    })
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
    written("cuMemAddressReserve", 0, |ptr| {
        // SAFETY: writes one address to a local; no fixed address is requested.
        unsafe { sys::cuMemAddressReserve(ptr, size, alignment, 0, 0) }
    })
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

/// Whether this device can create one minimum-granularity allocation with `prop` and
/// export it as the handle type `prop` requests: the one real test of a handle type
/// (attributes can claim support the fabric manager then refuses). Nothing outlives
/// the call: the exported fd is closed and the allocation released.
pub fn create_and_export(prop: &DeviceProp) -> DriverResult<()> {
    use sys::CUmemAllocationHandleType as Handles;
    let size = allocation_granularity(
        prop,
        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
    )?;
    // SAFETY: `size` is the granularity for `prop`; the handle is released below.
    let handle = unsafe { mem_create(size, prop) }?;
    let exported = match prop.0.requestedHandleTypes {
        Handles::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR => {
            // SAFETY: `handle` is live and was created with POSIX fds requested; the
            // exported fd is closed when the OwnedFd drops.
            unsafe { mem_export_fd(handle) }.map(drop)
        }
        // SAFETY: `handle` is live and was created with fabric handles requested.
        Handles::CU_MEM_HANDLE_TYPE_FABRIC => unsafe { mem_export_fabric(handle) }.map(drop),
        _ => Err(super::DriverError {
            call: "cuMemExportToShareableHandle",
            code: sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
        }),
    };
    // SAFETY: `handle` is live and unmapped, and not used again.
    let released = unsafe { mem_release(handle) };
    exported.and(released)
}
