//! Progress of a run in rounds (the slowest rank's count): a bar on a terminal, a
//! line every few seconds otherwise (logs, CI), nothing with `--json`. Ranks that have
//! ended no longer count, and once one has failed the count stops: the run is over.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

const LINE_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    what: &'static str,
    total: u64,
    /// Rounds of each rank still running; None once it has ended.
    done: Vec<Option<u64>>,
    stopped: bool,
    bar: Option<ProgressBar>,
    lines: bool,
    start: Instant,
    last_line: Instant,
}

impl Progress {
    pub fn new(what: &'static str, ranks: usize, total: u64, quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (terminal && !quiet).then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(&format!("{what} {{pos}}/{{len}} [{{elapsed}}]"))
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Progress {
            what,
            total,
            done: vec![Some(0); ranks],
            stopped: false,
            bar,
            lines: !terminal && !quiet,
            start: Instant::now(),
            last_line: Instant::now(),
        }
    }

    /// Rank `rank` has finished `done` rounds.
    pub fn record(&mut self, rank: usize, done: u64) {
        if let Some(Some(slot)) = self.done.get_mut(rank) {
            *slot = done;
        }
    }

    /// Rank `rank` has ended: the slowest is now among the others.
    pub fn leave(&mut self, rank: usize) {
        if let Some(slot) = self.done.get_mut(rank) {
            *slot = None;
        }
    }

    /// A rank failed: no more counting (the bar is cleared, no more lines).
    pub fn stop(&mut self) {
        self.finish();
        self.stopped = true;
    }

    /// Update the bar, or print a line when the last one is a few seconds old.
    pub fn show(&mut self) {
        let Some(slowest) = self.slowest() else {
            return;
        };
        if let Some(bar) = &self.bar {
            bar.set_position(slowest);
        } else if self.lines && self.last_line.elapsed() >= LINE_EVERY {
            self.last_line = Instant::now();
            eprintln!(
                "{} {slowest}/{} ({:.0} s)",
                self.what,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    /// Rounds of the slowest rank still running; None once a rank has failed.
    fn slowest(&self) -> Option<u64> {
        let running = self.done.iter().flatten().copied().min();
        (!self.stopped).then_some(running.unwrap_or(self.total))
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_that_ended_no_longer_holds_the_count_and_a_failure_stops_it() {
        let mut progress = Progress::new("rounds", 3, 200, true);
        progress.record(0, 7);
        progress.record(1, 3);
        progress.record(2, 9);
        assert_eq!(progress.slowest(), Some(3));
        progress.leave(1);
        progress.record(1, 4); // a late event of the rank that ended
        assert_eq!(progress.slowest(), Some(7));
        progress.stop();
        assert_eq!(progress.slowest(), None);
    }
}
