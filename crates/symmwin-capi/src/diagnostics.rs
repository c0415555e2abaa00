//! What the library tells about a device and the machine, and its live
//! allocations.

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::args::copy_out;
use crate::last_error::guard;
use crate::state::{provider, REGISTRY};
use crate::status::SymmwinStatus::{self, *};

/// Write `"posix_fd"` or `"fabric"` (the probed handle type of `device`) into `buf`.
///
/// # Safety
/// `buf` is NULL or has room for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn symmwin_handle_type(
    device: c_int,
    buf: *mut c_char,
    len: usize,
) -> SymmwinStatus {
    guard(|| {
        let name = provider(device)?.info().handle_type.to_string();
        // SAFETY: `buf` is NULL or has room for `len` bytes (this entry point's contract).
        unsafe { copy_out(&name, buf, len) }
    })
}

/// Write a JSON description of the machine (devices, handle types, peer access) into
/// `buf`; `*needed` gets the length including the NUL. With `buf` NULL only `*needed`
/// is written (a size query).
///
/// # Safety
/// `buf` is NULL or has room for `len` bytes; `needed` is NULL or points to a writable
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn symmwin_probe_json(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> SymmwinStatus {
    guard(|| {
        let json = symmwin::adapter::probe_machine_json();
        // SAFETY: `needed` is NULL or points to a writable `size_t` (the contract).
        if let Some(n) = unsafe { needed.as_mut() } {
            *n = json.len() + 1;
            if buf.is_null() {
                return Ok(SymmwinOk);
            }
        }
        // SAFETY: `buf` is NULL or has room for `len` bytes (this entry point's contract).
        unsafe { copy_out(&json, buf, len) }
    })
}

/// Number of live allocations (for leak checks in tests).
#[no_mangle]
pub extern "C" fn symmwin_allocation_count() -> usize {
    catch_unwind(AssertUnwindSafe(|| REGISTRY.allocation_count())).unwrap_or(0)
}
