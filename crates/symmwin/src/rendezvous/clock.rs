//! Where a rendezvous's wall time goes, for `symmwin bench rendezvous`: the
//! rendezvous owns one clock and each step marks the end of its phase on it.

use std::time::Instant;

use super::PhaseTimes;

/// A phase of [`PhaseTimes`] that a step's time goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Export,
    Publish,
    Gather,
    Reserve,
    Exchange,
    Import,
    Map,
    Pads,
}

/// The times so far and when the last step ended.
#[derive(Debug)]
pub(super) struct PhaseClock {
    times: PhaseTimes,
    last: Instant,
}

impl PhaseClock {
    pub(super) fn start() -> Self {
        PhaseClock {
            times: PhaseTimes::default(),
            last: Instant::now(),
        }
    }

    /// Start timing the steps of a new exchange from now.
    pub(super) fn restart(&mut self) {
        self.last = Instant::now();
    }

    /// `step` ends now: add the time since the last step ended to its phase.
    pub(super) fn lap(&mut self, step: Step) {
        let now = Instant::now();
        *self.slot(step) += micros(now - self.last);
        self.last = now;
    }

    /// Add the time since `started` to `step`'s phase, for work that spans other
    /// steps (pad pool growth runs a whole exchange of its own).
    pub(super) fn add_since(&mut self, step: Step, started: Instant) {
        *self.slot(step) += micros(started.elapsed());
    }

    /// Every rank took the same released window over whole.
    pub(super) fn mark_reused(&mut self) {
        self.times.reused = true;
    }

    pub(super) fn times(&self) -> PhaseTimes {
        self.times
    }

    fn slot(&mut self, step: Step) -> &mut f64 {
        let t = &mut self.times;
        match step {
            Step::Export => &mut t.export_us,
            Step::Publish => &mut t.publish_us,
            Step::Gather => &mut t.gather_us,
            Step::Reserve => &mut t.reserve_us,
            Step::Exchange => &mut t.exchange_us,
            Step::Import => &mut t.import_us,
            Step::Map => &mut t.map_us,
            Step::Pads => &mut t.pads_us,
        }
    }
}

fn micros(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lap_goes_to_its_own_phase_only() {
        let mut clock = PhaseClock::start();
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.lap(Step::Gather);
        clock.lap(Step::Map);
        let t = clock.times();
        assert!(t.gather_us >= 2000.0, "{t:?}");
        assert!(t.map_us < t.gather_us, "{t:?}");
        assert_eq!(t.export_us, 0.0);
        assert!(!t.reused);
        clock.mark_reused();
        assert!(clock.times().reused);
    }
}
