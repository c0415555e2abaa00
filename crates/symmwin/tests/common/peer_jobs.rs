//! World-2 jobs in which rank 1 leaves (exits, or holds until the test kills or stops
//! it) while rank 0 waits for it: the runner the dead-peer tests of the host and of the
//! CUDA provider share.
//!
//! The worker reads `WAIT` (what rank 0 waits in), `PEER` (`exit`: rank 1 exits 0 at
//! once; `hold`: rank 1 writes the file `READY` names, then sleeps) and reports a
//! result line with at least `at=` (when rank 0's wait ended, [`unix_ms`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{field, result, Job, Ranks};

/// Milliseconds since the epoch, comparable between the test and its workers.
pub fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Rank 0's result line for a wait begun at `started` that failed with `err`, naming
/// `exited` as the peer it reported gone (`no` when none): the fields every dead-peer
/// test reads, the message with `_` for spaces so that the line splits into fields.
pub fn failed_wait(err: &symmwin::Error, started: Instant, exited: &str) -> String {
    format!(
        "at={} waited={:.3} exited={exited} timeout={} lost={} peer={:?} msg={}",
        unix_ms(),
        started.elapsed().as_secs_f64(),
        err.is_timeout(),
        err.is_context_lost(),
        err.peer(),
        err.to_string().replace(' ', "_")
    )
}

/// The jobs of one dead-peer test: its worker, and how long to let rank 0's wait start
/// before acting on rank 1.
pub struct PeerJob {
    pub worker: &'static str,
    pub settle: Duration,
}

impl PeerJob {
    /// Run the worker at world 2 with rank 1 doing `peer` and rank 0 waiting in `wait`;
    /// `act` is done to rank 1 once it is ready and `settle` has passed. Returns rank
    /// 0's result line and when `act` ran.
    pub fn run(
        &self,
        (wait, peer): (&str, &str),
        timeout_ms: u64,
        act: impl FnOnce(&mut Ranks),
    ) -> (String, u128) {
        let job = Job::new(&format!("{}-{}-{peer}", &self.worker[..4], &wait[..4]));
        let ready = job.dir.join("ready");
        let env = [
            ("WAIT", wait.to_owned()),
            ("PEER", peer.to_owned()),
            ("READY", ready.display().to_string()),
            super::timeout_ms(timeout_ms),
        ];
        let mut ranks = job.spawn(2, self.worker, &env);
        let deadline = Instant::now() + Duration::from_secs(60);
        while peer != "exit" && !ready.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(self.settle);
        let acted = unix_ms();
        act(&mut ranks);
        let outs = ranks.wait(Duration::from_secs(90));
        super::assert_success(&outs[0], "rank 0");
        (result(&outs[0]), acted)
    }

    /// How long after rank 1 exits 0 (`how` = "exit") or is SIGKILLed ("kill") rank 0's
    /// wait in `wait` failed naming it, in seconds.
    pub fn named_after(&self, wait: &str, how: &str, timeout_ms: u64) -> f64 {
        let (r, acted) = match how {
            "exit" => self.run((wait, "exit"), timeout_ms, |_| {}),
            _ => self.run((wait, "hold"), timeout_ms, |ranks| ranks.kill(1)),
        };
        assert_eq!(field(&r, "exited"), "rank1:exited", "{wait} {how}: {r}");
        match how {
            "exit" => field(&r, "waited").parse().unwrap(),
            _ => seconds_after(&r, acted),
        }
    }

    /// Rank 1 stopped (alive but silent) past a 1 s timeout, then killed: in each of
    /// `waits`, rank 0 must wait its whole timeout and fail by it (`timed_out` says
    /// whether rank 0's result line reports a timeout), not name rank 1 as exited.
    pub fn stopped_peer_gets_the_whole_timeout(&self, waits: &[&str], timed_out: fn(&str) -> bool) {
        for wait in waits {
            let (r, _) = self.run((wait, "hold"), 1000, stop_then_kill);
            assert_eq!(field(&r, "exited"), "no", "{wait}: {r}");
            assert!(timed_out(&r), "{wait}: {r}");
            let waited: f64 = field(&r, "waited").parse().unwrap();
            assert!(waited >= 1.0, "{wait}: {r}");
        }
    }

    /// The rows of docs/RELIABILITY.md's detection table: for each of `waits`, a peer
    /// that exits 0 and one that is SIGKILLed, `RUNS` times each (default 20); prints
    /// median and max of [`PeerJob::named_after`].
    pub fn print_detection_figures(&self, waits: &[&str], timeout_ms: u64) {
        let runs: usize = std::env::var("RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(20);
        println!(
            "| wait | peer | named after (median / max of {runs} runs) |\n| --- | --- | --- |"
        );
        for wait in waits {
            for how in ["exit", "kill"] {
                let mut times: Vec<f64> = (0..runs)
                    .map(|_| self.named_after(wait, how, timeout_ms))
                    .collect();
                times.sort_by(f64::total_cmp);
                let (median, max) = (times[times.len() / 2], times[times.len() - 1]);
                let peer = if how == "exit" { "exits 0" } else { "SIGKILL" };
                println!(
                    "| {wait} | {peer} | {:.0} / {:.0} ms |",
                    median * 1e3,
                    max * 1e3
                );
            }
        }
    }
}

/// Stop rank 1 (alive but silent) for longer than a 1 s timeout, then kill it.
pub fn stop_then_kill(ranks: &mut Ranks) {
    let pid = ranks.pid(1) as i32;
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Seconds from `acted` to the end of the wait reported in `result`.
pub fn seconds_after(result: &str, acted: u128) -> f64 {
    (field(result, "at").parse::<u128>().unwrap() - acted) as f64 / 1000.0
}

/// Rank 1's part of the job: exit at once, or say it is ready and sleep until the test
/// acts on it.
pub fn rank_1_leaves() -> ! {
    if std::env::var("PEER").as_deref() == Ok("exit") {
        std::process::exit(0);
    }
    std::fs::write(std::env::var("READY").unwrap(), b"").unwrap();
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(0)
}
