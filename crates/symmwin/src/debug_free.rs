//! The use-after-free debug mode (`SYMMWIN_DEBUG_FREE=1`): no window is reused, and a
//! freed window's address range stays reserved with no access, so a pointer kept after
//! free faults at its first use instead of reaching a peer's next allocation.
//!
//! It costs address space (never memory: the pages are released) and every re-allocation
//! pays a full rendezvous, so it is for finding such bugs, not for production.

use std::sync::OnceLock;

/// The variable that turns the mode on.
pub const VARIABLE: &str = "SYMMWIN_DEBUG_FREE";

/// Whether the mode is on in this process (read once: `1` on, unset or `0` off).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var(VARIABLE).is_ok_and(|v| v.trim() == "1"))
}
