//! What every host wait does besides looking at its own condition: it ends when the
//! caller interrupts ([`crate::interrupt`]), and one that takes long says so.
//!
//! A wait longer than 10 s prints one line on stderr, then one every 30 s, naming what
//! it waits for and since when ("symmwin rank 0 has waited 30 s for rank(s) \[1\] in
//! the socket trade of rendezvous 3 (timeout 1800 s)"), so that a long default timeout
//! never passes in silence. `SYMMWIN_LOG=error` (or `off`) silences it.
//!
//! The interrupt hook may take Python's GIL, so a wait looks at it only once it has
//! lasted `QUIET_START`: the common, quick wait (a rendezvous whose peers are there)
//! never calls it.

use std::time::{Duration, Instant};

use crate::error::{Phase, Result};

/// How often a host wait looks at interrupts and at its peers' death marks (what
/// bounds how soon it ends after either).
pub const LOOK_EVERY: Duration = Duration::from_millis(50);
/// A wait looks at interrupts only from this long on, then at every tick.
const QUIET_START: Duration = Duration::from_millis(20);

/// The first line after this long.
const FIRST_REPORT: Duration = Duration::from_secs(10);
/// Then one line every this long.
const REPORT_EVERY: Duration = Duration::from_secs(30);

/// One host wait in progress.
pub struct Waiting {
    phase: Phase,
    rank: usize,
    timeout: Duration,
    started: Instant,
    next_report: Duration,
}

impl Waiting {
    /// A wait of rank `rank` in `phase`, for at most `timeout`.
    #[inline]
    pub fn new(phase: Phase, rank: usize, timeout: Duration) -> Self {
        Waiting {
            phase,
            rank,
            timeout,
            started: Instant::now(),
            next_report: FIRST_REPORT,
        }
    }

    /// Call at least every [`LOOK_EVERY`] while waiting, with what the wait is for
    /// ("for rank(s) \[1\] in rendezvous 3"): fails once the caller interrupted.
    pub fn tick(&mut self, describe: impl FnOnce() -> String) -> Result<()> {
        let waited = self.started.elapsed();
        if waited >= QUIET_START {
            crate::interrupt::check(self.phase).map_err(|e| e.at_rank(self.rank))?;
        }
        if waited >= self.next_report {
            self.next_report = waited + REPORT_EVERY;
            if reports_on() {
                eprintln!(
                    "symmwin rank {} has waited {} s {} (timeout {} s)",
                    self.rank,
                    waited.as_secs(),
                    describe(),
                    self.timeout.as_secs()
                );
            }
        }
        Ok(())
    }
}

/// Whether progress lines are printed: unless `SYMMWIN_LOG` asks for errors only.
fn reports_on() -> bool {
    let level = std::env::var("SYMMWIN_LOG").unwrap_or_default();
    !matches!(
        level.trim(),
        "error" | "off" | "symmwin=error" | "symmwin=off"
    )
}
