//! The error channel: a per-thread last-error message, and the guards that turn
//! a `Result` or a panic into a status and that message.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::args::out_arg;
use crate::status::status_of;
use crate::status::SymmwinStatus::{self, *};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: String) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // A thread being torn down has no message slot left; losing the message there
    // beats a panic at the boundary.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// A call that succeeds leaves no message of an earlier failure behind. The common
/// case (no message) only reads the thread-local slot.
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|e| {
        if !e.borrow().is_empty() {
            *e.borrow_mut() = CString::default();
        }
    });
}

/// Run `f`, turning errors and panics into a status and the last-error message.
pub(crate) fn guard(f: impl FnOnce() -> symmwin::Result<SymmwinStatus>) -> SymmwinStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(status)) => {
            clear_last_error();
            status
        }
        Ok(Err(e)) => {
            set_last_error(e.to_string());
            status_of(&e)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("symmwin: internal error (panic): {what}"));
            SymmwinPanic
        }
    }
}

/// The process's configuration, read once; the first use also sets up `SYMMWIN_LOG`.
/// [`guard`] for an entry point with one result: `f`'s value, written to `*out`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a `T`.
pub(crate) unsafe fn guard_out<T>(
    out: *mut T,
    f: impl FnOnce() -> symmwin::Result<T>,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: a propagation of the caller's assertion.
        let out = unsafe { out_arg(out, "out") }?;
        *out = f()?;
        Ok(SymmwinOk)
    })
}

/// The last error message of this thread (empty if none). Valid until the next call
/// on this thread.
#[no_mangle]
pub extern "C" fn symmwin_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}
