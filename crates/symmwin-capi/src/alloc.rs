//! Allocations: `symmwin_alloc`, `symmwin_free` and what an address belongs to.

use std::ffi::{c_int, c_void};

use crate::args::out_arg;
use crate::last_error::{guard, guard_out};
use crate::state::{provider, REGISTRY};
use crate::status::SymmwinStatus::{self, *};

/// Allocate `size` zero-filled bytes on `device` (-1: host shared memory).
///
/// # Safety
/// `out` is NULL or points to writable storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_alloc(
    device: c_int,
    size: usize,
    out: *mut *mut c_void,
) -> SymmwinStatus {
    let alloc = || Ok(REGISTRY.alloc(provider(device)?, size)? as *mut c_void);
    // SAFETY: the pointers meet the `# Safety` contract of this entry point.
    unsafe { guard_out(out, alloc) }
}

/// Free an allocation made by `symmwin_alloc`. Local: windows made from it stay valid.
/// NULL is a no-op, as for free(3).
#[no_mangle]
pub extern "C" fn symmwin_free(ptr: *mut c_void) -> SymmwinStatus {
    guard(|| {
        if ptr.is_null() {
            return Ok(SymmwinOk);
        }
        REGISTRY.free(ptr as usize).map(|()| SymmwinOk)
    })
}

/// Bytes requested for the allocation covering `ptr`.
///
/// # Safety
/// `out` is NULL or points to writable storage for the result. `ptr` is only compared
/// with live allocations, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_alloc_size(ptr: *mut c_void, out: *mut usize) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let out = unsafe { out_arg(out, "out") }?;
        match REGISTRY.find(ptr as usize) {
            Some((alloc, _)) => {
                *out = alloc.size();
                Ok(SymmwinOk)
            }
            None => Ok(SymmwinNotFound),
        }
    })
}

/// Where an allocation lives.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SymmwinAllocInfo {
    /// Address the allocation starts at (what `symmwin_alloc` returned).
    pub base: usize,
    /// Bytes requested.
    pub size: usize,
    /// CUDA device, -1 for host memory.
    pub device: c_int,
}

/// The allocation covering `ptr` (which may point inside it).
/// `SYMMWIN_NOT_FOUND` if `ptr` is not inside a live symmwin allocation.
///
/// # Safety
/// `out` is NULL or points to writable storage for the result. `ptr` is only compared
/// with live allocations, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_alloc_info(
    ptr: *mut c_void,
    out: *mut SymmwinAllocInfo,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let out = unsafe { out_arg(out, "out") }?;
        match REGISTRY.find(ptr as usize) {
            Some((alloc, _)) => {
                *out = SymmwinAllocInfo {
                    base: alloc.ptr(),
                    size: alloc.size(),
                    device: alloc.provider().info().device,
                };
                Ok(SymmwinOk)
            }
            None => Ok(SymmwinNotFound),
        }
    })
}
