//! Progress of a run in rounds (the slowest rank's count): a bar on a terminal, a
//! line every few seconds otherwise (logs, CI), nothing with `--json`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

const LINE_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    what: &'static str,
    total: u64,
    done: Vec<u64>,
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
            done: vec![0; ranks],
            bar,
            lines: !terminal && !quiet,
            start: Instant::now(),
            last_line: Instant::now(),
        }
    }

    /// Rank `rank` has finished `done` rounds.
    pub fn record(&mut self, rank: usize, done: u64) {
        if let Some(slot) = self.done.get_mut(rank) {
            *slot = done;
        }
    }

    /// Update the bar, or print a line when the last one is a few seconds old.
    pub fn show(&mut self) {
        let slowest = self.done.iter().copied().min().unwrap_or(0);
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

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
