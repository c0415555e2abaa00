//! The group an allocation was made for (torch's `empty_strided_p2p(group_name=...)`),
//! so that a later rendezvous without a group finds it. The core's registry keeps it
//! with the allocation; the adapter keeps no map of its own.

use std::ffi::{c_char, c_int, c_void};

use crate::args::{copy_out, str_arg};
use crate::last_error::{guard, guard_out};
use crate::state::{provider, REGISTRY};
use crate::status::SymmwinStatus;

/// Allocate as `symmwin_alloc` does, for group `group` (NULL: for no group in
/// particular); `symmwin_alloc_group` answers it for every pointer inside.
///
/// # Safety
/// `group` is NULL or a NUL-terminated string; `out` is NULL or points to writable
/// storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_alloc_for_group(
    device: c_int,
    size: usize,
    group: *const c_char,
    out: *mut *mut c_void,
) -> SymmwinStatus {
    let alloc = || {
        let name = match group.is_null() {
            true => None,
            // SAFETY: `group` is a NUL-terminated string (the contract).
            false => Some(unsafe { str_arg(group, "group name") }?),
        };
        let ptr = REGISTRY.alloc_for_group(provider(device)?, size, name)?;
        Ok(ptr as *mut c_void)
    };
    // SAFETY: the pointers meet the `# Safety` contract of this entry point.
    unsafe { guard_out(out, alloc) }
}

/// Write the name of the group the allocation covering `ptr` was made for into `buf`
/// (`len` bytes, NUL-terminated). `SYMMWIN_NOT_FOUND` when `ptr` is not inside a
/// live allocation or it was made for no group.
///
/// # Safety
/// `buf` is NULL or has room for `len` bytes. `ptr` is only compared with live
/// allocations, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_alloc_group(
    ptr: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> SymmwinStatus {
    guard(|| {
        match REGISTRY.group_of(ptr as usize) {
            // SAFETY: `buf` has room for `len` bytes (the contract).
            Some(name) => unsafe { copy_out(&name, buf, len) },
            None => Ok(SymmwinStatus::SymmwinNotFound),
        }
    })
}
