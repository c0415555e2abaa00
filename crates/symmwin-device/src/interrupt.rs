//! Interrupting host waits: the caller's way to end every wait of this process early.
//!
//! The library installs no signal handler. A program that wants Ctrl-C to end a wait
//! calls [`request`] from its own handler (it only stores an atomic, so it is
//! async-signal-safe); the Python adapter instead sets a [`set_check`] hook that asks
//! the interpreter whether a signal is pending. Every host wait (the store gather, the
//! socket trade, host signals and barriers, host ops) looks at both at least every
//! 50 ms and then fails with [`ErrorKind::Interrupted`], leaving the group out of step
//! as any failed rendezvous does (docs/design.md, "All or nothing"). Device-side waits
//! cannot be interrupted: they end by their timeout or a peer's death.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::error::{Error, ErrorKind, Phase, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static CHECK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// End every host wait in progress, and every later one until [`clear`], with
/// [`ErrorKind::Interrupted`]. Async-signal-safe.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Let waits run again after [`request`].
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// Whether [`request`] was called since the last [`clear`].
#[inline]
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// A hook every host wait calls at least every 50 ms: `true` ends the wait as
/// interrupted (e.g. "the interpreter has a signal pending"). `None` removes it.
pub fn set_check(check: Option<fn() -> bool>) {
    let raw = check.map_or(std::ptr::null_mut(), |f| f as *mut ());
    CHECK.store(raw, Ordering::SeqCst);
}

/// The error a wait in `phase` ends with when it was interrupted.
#[inline]
pub fn check(phase: Phase) -> Result<()> {
    let hooked = CHECK.load(Ordering::SeqCst);
    let by_hook = !hooked.is_null() && {
        // SAFETY: only `set_check` stores into CHECK, and only `fn() -> bool` pointers.
        let check: fn() -> bool = unsafe { std::mem::transmute::<*mut (), fn() -> bool>(hooked) };
        check()
    };
    match requested() || by_hook {
        true => Err(Error::new(phase, ErrorKind::Interrupted)),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes() -> bool {
        true
    }

    #[test]
    fn a_hook_that_says_yes_interrupts() {
        set_check(Some(yes));
        let result = check(Phase::Signal);
        set_check(None);
        assert!(matches!(result.unwrap_err().kind(), ErrorKind::Interrupted));
        assert!(check(Phase::Signal).is_ok());
    }
}
