//! The group an allocation was made for (torch's `empty_strided_p2p(group_name=...)`),
//! so that a later rendezvous without a group finds it: the adapter keeps no map of
//! its own.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use symmwin::adapter::Recover;

use crate::args::{copy_out, str_arg};
use crate::last_error::{guard, guard_out};
use crate::state::{provider, REGISTRY};
use crate::status::SymmwinStatus;

/// Group name by allocation id, for the allocations made for a named group only.
static ALLOC_GROUPS: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());

fn groups() -> std::sync::MutexGuard<'static, BTreeMap<u64, String>> {
    // A map of strings is consistent whatever panicked while it was held.
    ALLOC_GROUPS.lock().recover()
}

/// Forget the group of the allocation at `ptr` (before it is freed).
pub(crate) fn forget(ptr: usize) {
    if let Some((alloc, _)) = REGISTRY.find(ptr) {
        groups().remove(&alloc.id());
    }
}

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
        let ptr = REGISTRY.alloc(provider(device)?, size)?;
        if let (Some(name), Some((alloc, _))) = (name, REGISTRY.find(ptr)) {
            groups().insert(alloc.id(), name.to_owned());
        }
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
        let name = REGISTRY
            .find(ptr as usize)
            .and_then(|(alloc, _)| groups().get(&alloc.id()).cloned());
        match name {
            // SAFETY: `buf` has room for `len` bytes (the contract).
            Some(name) => unsafe { copy_out(&name, buf, len) },
            None => Ok(SymmwinStatus::SymmwinNotFound),
        }
    })
}
