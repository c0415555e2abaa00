//! SIGINT and SIGTERM to a supervising command: noted, so that it can kill and reap
//! its ranks and remove its store before it exits.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    // Only an atomic store: all a signal handler may safely do here.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// Catch SIGINT and SIGTERM from now on (the supervisor only, never a rank).
pub fn catch() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `note` is async-signal-safe (one atomic store) and lives forever.
        unsafe { libc::signal(signal, note as *const () as libc::sighandler_t) };
    }
}

/// The signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
