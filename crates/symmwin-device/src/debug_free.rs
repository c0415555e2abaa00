//! The use-after-free debug mode (`SYMMWIN_DEBUG_FREE=1`): no window is reused, and a
//! freed window's address range stays reserved with no access, so a pointer kept after
//! free faults at its first use instead of reaching a peer's next allocation.
//!
//! The quarantine is bounded: the address ranges of the last
//! `SYMMWIN_DEBUG_FREE_KEEP` freed windows (default [`DEFAULT_KEEP`]) stay reserved,
//! and the oldest is released when one more comes. So the promise is "a pointer kept
//! across the last N frees faults"; one kept across more may reach a later window.
//! Without the bound every freed window kept its range (and one memory mapping) for
//! good, until the process ran out of mappings.
//!
//! It costs address space and mappings (never memory: the pages are released) and
//! every re-allocation pays a full rendezvous, so it is for finding such bugs, not for
//! production.

use crate::lock::Recover;
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

/// The variable that turns the mode on.
pub const VARIABLE: &str = "SYMMWIN_DEBUG_FREE";

/// The variable that bounds the quarantine.
pub const KEEP_VARIABLE: &str = "SYMMWIN_DEBUG_FREE_KEEP";

/// How many freed windows stay quarantined when `SYMMWIN_DEBUG_FREE_KEEP` is unset.
/// A window holds one mapping per rank while quarantined, so this stays far below
/// Linux's default `vm.max_map_count` (65530) even at world 8.
pub const DEFAULT_KEEP: usize = 1024;

/// Whether the mode is on in this process (read once: `1` on, unset or `0` off).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var(VARIABLE).is_ok_and(|v| v.trim() == "1"))
}

/// How many freed windows stay quarantined (read once; a bad value is refused by the
/// settings check at start-up, and means the default here).
pub fn keep() -> usize {
    static KEEP: OnceLock<usize> = OnceLock::new();
    *KEEP.get_or_init(|| {
        std::env::var(KEEP_VARIABLE)
            .ok()
            .and_then(|v| parse_keep(&v).ok())
            .unwrap_or(DEFAULT_KEEP)
    })
}

/// A `SYMMWIN_DEBUG_FREE_KEEP` value: a whole number above 0.
pub fn parse_keep(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("is zero: at least the last free must be kept".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("is not a whole number above 0".into()),
    }
}

/// Releases one quarantined address range (unmaps or frees the reservation).
pub type Release = Box<dyn FnOnce() + Send>;

static QUARANTINE: Mutex<VecDeque<Release>> = Mutex::new(VecDeque::new());

/// Quarantine one freed window's range: `release` runs once [`keep`] newer ones are.
/// The oldest ranges are released here, by the caller (which holds what releasing
/// needs, e.g. a CUDA context), outside the lock.
pub fn quarantine(release: Release) {
    let expired = {
        let mut queue = QUARANTINE.lock().recover();
        admit(&mut queue, release, keep())
    };
    for release in expired {
        release();
    }
}

/// Push `entry`, and take out the oldest entries beyond `keep`, oldest first.
fn admit<T>(queue: &mut VecDeque<T>, entry: T, keep: usize) -> Vec<T> {
    queue.push_back(entry);
    let excess = queue.len().saturating_sub(keep);
    queue.drain(..excess).collect()
}

/// What a failed address reservation adds in this mode, naming it: the quarantine
/// holds ranges that would otherwise be free. Empty when the mode is off.
pub fn exhaustion_note() -> String {
    if !enabled() {
        return String::new();
    }
    format!(
        " ({VARIABLE}=1 keeps the address ranges of the last {} freed windows reserved; \
         lower {KEEP_VARIABLE} or turn the mode off)",
        keep()
    )
}

/// `err`, from a failed address reservation, with [`exhaustion_note`] added to its
/// reason when the mode is on.
pub fn name_mode_in(mut err: crate::error::Error) -> crate::error::Error {
    use crate::error::ErrorKind;
    if !enabled() {
        return err;
    }
    let note = exhaustion_note();
    match err.kind_mut() {
        ErrorKind::Limit(reason) => reason.push_str(&note),
        ErrorKind::Os { source, .. } => {
            *source = std::io::Error::new(source.kind(), format!("{source}{note}"));
        }
        ErrorKind::Driver { message, .. } => message.push_str(&note),
        _ => {}
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entries_leave_first_and_the_last_keep_stay() {
        let mut queue = VecDeque::new();
        let mut released = Vec::new();
        for n in 0..10 {
            released.extend(admit(&mut queue, n, 4));
            assert!(queue.len() <= 4);
        }
        assert_eq!(released, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(queue.into_iter().collect::<Vec<_>>(), vec![6, 7, 8, 9]);
    }

    #[test]
    fn keep_must_be_a_whole_number_above_zero() {
        assert_eq!(parse_keep(" 16 "), Ok(16));
        assert!(parse_keep("0").unwrap_err().contains("is zero"));
        assert!(parse_keep("-1").is_err() && parse_keep("many").is_err());
    }
}
