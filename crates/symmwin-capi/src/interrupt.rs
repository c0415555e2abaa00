//! The hook host waits call to learn that the caller wants them to end (Ctrl-C in
//! Python): see `symmwin::adapter::set_interrupt_check`.

use std::sync::atomic::{AtomicPtr, Ordering};

use crate::{guard, SymmwinStatus};

/// The caller's hook, or NULL.
static HOOK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// The hook as the core calls it.
fn call_hook() -> bool {
    let raw = HOOK.load(Ordering::SeqCst);
    if raw.is_null() {
        return false;
    }
    // SAFETY: only `symmwin_set_interrupt_check` stores into HOOK, and only the
    // non-null `extern "C" fn() -> i32` it was given, which its contract keeps valid.
    let hook = unsafe { std::mem::transmute::<*mut (), extern "C" fn() -> i32>(raw) };
    hook() != 0
}

/// Set the hook every host wait calls at least every 50 ms, on the waiting thread:
/// nonzero ends the wait with `SYMMWIN_INTERRUPTED`. NULL removes it.
///
/// # Safety
/// `check` is NULL or a function that stays callable for the rest of the process (or
/// until replaced), may be called from any thread that waits, and never unwinds.
#[no_mangle]
pub unsafe extern "C" fn symmwin_set_interrupt_check(
    check: Option<extern "C" fn() -> i32>,
) -> SymmwinStatus {
    guard(|| {
        let raw = check.map_or(std::ptr::null_mut(), |f| f as *mut ());
        HOOK.store(raw, Ordering::SeqCst);
        symmwin::adapter::set_interrupt_check(check.map(|_| call_hook as fn() -> bool));
        Ok(SymmwinStatus::SymmwinOk)
    })
}
