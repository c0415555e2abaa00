//! What each rank of a poison job does: round 0 verified, round 1 the fault, rounds 2-7
//! with fresh inputs on a poisoned window, then another window of the group and a
//! window made after the free.

use std::time::{Duration, Instant};

use super::calls::{Outcome, Round};
use super::common;
use symmwin::{Allocation, ErrorKind, SignalOptions, Window};

/// The rounds a poisoned window must refuse (six, after the faulty round 1).
pub const REFUSED_ROUNDS: std::ops::Range<u64> = 2..8;
/// How long the late rank sleeps before its round-1 call, and when the victim is
/// interrupted in its own.
pub const LATE: Duration = Duration::from_millis(900);
pub const INTERRUPT_AFTER: Duration = Duration::from_millis(300);
/// The limit of round 1's calls in the `timeout` jobs (the others use the group's,
/// long enough never to run out).
pub const TIMEOUT: Duration = Duration::from_millis(400);
/// How long the killed rank lives into round 1.
pub const KILL_AFTER: Duration = Duration::from_millis(200);
/// The limit of the verifying calls that follow the fault (well past `LATE`).
const SETTLE: Duration = Duration::from_secs(20);

/// Counts of one rank's rounds, and what its round-1 call did.
#[derive(Default)]
struct Tally {
    verified: usize,
    refused: usize,
    wrong: Vec<String>,
    other_failures: Vec<String>,
    slowest_refusal: Duration,
}

impl Tally {
    /// Count a round that must be refused (a poisoned window's).
    fn refused_round(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Failed { error, took } if matches!(error.kind(), ErrorKind::Poisoned(_)) => {
                self.refused += 1;
                self.slowest_refusal = self.slowest_refusal.max(took);
            }
            Outcome::Failed { error, .. } => self.other_failures.push(error.to_string()),
            Outcome::Verified => self.verified += 1,
            Outcome::Wrong(what) => self.wrong.push(what),
        }
    }
}

/// A word for the result line: what an outcome was.
fn word(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Verified => "verified".into(),
        Outcome::Wrong(_) => "WRONG".into(),
        Outcome::Failed { error, .. } => match error.kind() {
            ErrorKind::Poisoned(_) => "poisoned".into(),
            ErrorKind::Timeout { .. } => "timeout".into(),
            ErrorKind::Interrupted => "interrupted".into(),
            ErrorKind::PeerExited { .. } => "peer_exited".into(),
            other => format!("{other}").replace(' ', "_"),
        },
    }
}

/// Round 1 on this rank: the victim (rank 0) is interrupted (`interrupt`), every rank
/// but the late one times out (`timeout`), or the late rank dies (`kill`).
fn faulty_round(cause: &str, w: &Window, call: &str) -> (Outcome, Duration) {
    let (rank, world) = (w.rank(), w.world());
    let late = rank == world - 1;
    if matches!(call, "put_signal" | "wait_signal") && rank != 0 && !late {
        // Not a party to the signal: its refused rounds start after the fault.
        std::thread::sleep(LATE + INTERRUPT_AFTER);
        return (Outcome::Verified, Duration::ZERO);
    }
    if late {
        if cause == "kill" {
            std::thread::sleep(KILL_AFTER);
            // SAFETY: a plain signal to this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        std::thread::sleep(LATE);
    }
    let interrupter = (cause == "interrupt" && rank == 0).then(|| {
        std::thread::spawn(|| {
            std::thread::sleep(INTERRUPT_AFTER);
            symmwin::request_interrupt();
        })
    });
    let started = Instant::now();
    let round = Round {
        w,
        round: 1,
        timeout: (cause == "timeout").then_some(TIMEOUT),
        fault: true,
    };
    let outcome = round.play(call);
    let took = started.elapsed();
    if let Some(thread) = interrupter {
        thread.join().unwrap();
        symmwin::clear_interrupt();
    }
    (outcome, took)
}

/// One verified round on `w` with a long limit; the word for the result line.
fn verify(w: &Window, call: &str, round: u64) -> String {
    let settle = w.barrier(SignalOptions::default().timeout(SETTLE));
    if let Err(e) = settle {
        return word(&Outcome::Failed {
            error: e,
            took: Duration::ZERO,
        });
    }
    let round = Round {
        w,
        round,
        timeout: Some(SETTLE),
        fault: false,
    };
    word(&round.play(call))
}

/// The whole job on this rank (`CAUSE`, `CALL` from the environment).
pub fn poison_case(rank: usize, world: usize) -> String {
    let cause = std::env::var("CAUSE").unwrap();
    let call = std::env::var("CALL").unwrap();
    let (group, provider) = common::join(rank, world);
    let alloc = Allocation::new(provider.clone(), 16384).unwrap();
    let w = group.rendezvous(&alloc).unwrap();
    let other_alloc = Allocation::new(provider.clone(), 16384).unwrap();
    let other = group.rendezvous(&other_alloc).unwrap();
    let first = Round {
        w: &w,
        round: 0,
        timeout: None,
        fault: false,
    };
    let round0 = word(&first.play(&call));
    other.barrier(SignalOptions::default()).unwrap();

    let (round1, took) = faulty_round(&cause, &w, &call);
    let mut tally = Tally::default();
    if let Outcome::Wrong(what) = &round1 {
        tally.wrong.push(what.clone());
    }
    let poisoned_here = match &round1 {
        Outcome::Failed { error, .. } => error.poisoned_window().is_some(),
        _ => false,
    };
    for round in REFUSED_ROUNDS {
        let r = Round {
            w: &w,
            round,
            timeout: None,
            fault: false,
        };
        tally.refused_round(r.play(&call));
    }
    let first_failure = w
        .poisoned()
        .map_or("none".into(), |p| format!("{}:{}", p.rank, p.call));
    let other_word = verify(&other, &call, 8);
    drop(w);
    drop(alloc);
    let fresh_word = if cause == "kill" {
        "skipped".into()
    } else {
        let fresh_alloc = Allocation::new(provider, 16384).unwrap();
        let fresh = group.rendezvous(&fresh_alloc).unwrap();
        verify(&fresh, &call, 9)
    };
    format!(
        "round0={round0} round1={} round1_s={:.3} round1_poisoned={poisoned_here} \
         verified={} refused={} wrong={} other_failures={} slowest_refusal_s={:.4} \
         first={first_failure} other={other_word} fresh={fresh_word} detail={}",
        word(&round1),
        took.as_secs_f64(),
        tally.verified,
        tally.refused,
        tally.wrong.len(),
        tally.other_failures.len(),
        tally.slowest_refusal.as_secs_f64(),
        tally
            .wrong
            .iter()
            .chain(&tally.other_failures)
            .next()
            .map_or("-".into(), |d| d.replace(' ', "_")),
    )
}
