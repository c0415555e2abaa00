//! A local peer that exits (cleanly or killed) while a rank waits for it (in a
//! rendezvous, a host barrier, a host signal wait, a host op) is named within a second;
//! one that is stopped (alive but slow) gets the whole timeout. Each case is one
//! world-2 job of worker processes on the host provider.

mod common;

use std::time::{Duration, Instant};

use common::field;
use common::peer_jobs::{failed_wait, rank_1_leaves, seconds_after as after, PeerJob};
use symmwin::{
    ops::{OpOptions, Operand},
    Allocation, ErrorKind, SignalOptions,
};

common::worker! { "wait_in_rendezvous" => wait_in_rendezvous }

/// Both ranks make one window (so each knows the other's pid); then rank 1 does what
/// `PEER` says (`exit`: exits 0; `hold`: sleeps, for the test to kill or stop) and rank
/// 0 waits for it in `WAIT` (rendezvous, barrier, wait_signal, all_to_all), reporting
/// how it ended and when.
fn wait_in_rendezvous(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    let alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    if rank == 1 {
        rank_1_leaves();
    }
    let next = Allocation::new(provider, 4096).unwrap();
    let started = Instant::now();
    let half = Operand::new(&window, 0, 2048);
    let other = Operand::new(&window, 2048, 2048);
    let err = match std::env::var("WAIT").unwrap().as_str() {
        "rendezvous" => group.rendezvous(&next).map(drop),
        "barrier" => window.barrier(SignalOptions::default()),
        "wait_signal" => window.wait_signal(1, SignalOptions::default()),
        "all_to_all" => symmwin::ops::all_to_all(half, other, 4, &OpOptions::default()),
        other => panic!("unknown wait {other}"),
    }
    .unwrap_err();
    drop(window);
    let exited = match err.kind() {
        ErrorKind::PeerExited { rank, how, .. } => format!("rank{rank}:{}", how.replace(' ', "_")),
        _ => "no".into(),
    };
    failed_wait(&err, started, &exited)
}

/// The jobs of these tests.
const JOB: PeerJob = PeerJob {
    worker: "wait_in_rendezvous",
    settle: Duration::ZERO,
};

/// Every host wait kind.
const WAITS: [&str; 4] = ["rendezvous", "barrier", "wait_signal", "all_to_all"];

#[test]
fn a_peer_that_exits_cleanly_is_named_within_a_second_in_every_host_wait() {
    for wait in WAITS {
        let (r, _) = JOB.run((wait, "exit"), 10_000, |_| {});
        assert_eq!(field(&r, "exited"), "rank1:exited", "{wait}: {r}");
        let waited: f64 = field(&r, "waited").parse().unwrap();
        assert!(waited < 1.0, "{wait}: {r}");
    }
}

#[test]
fn a_killed_peer_is_named_within_a_second_in_every_host_wait() {
    for wait in WAITS {
        let (r, acted) = JOB.run((wait, "hold"), 10_000, |ranks| ranks.kill(1));
        assert_eq!(field(&r, "exited"), "rank1:exited", "{wait}: {r}");
        let late = after(&r, acted);
        assert!(late < 1.0, "{wait}: named {late} s after the kill: {r}");
    }
}

#[test]
fn a_stopped_peer_gets_the_whole_timeout_in_every_host_wait() {
    JOB.stopped_peer_gets_the_whole_timeout(&WAITS, |r| field(r, "timeout") == "true");
}

/// The figures behind docs/RELIABILITY.md's table of failures: for each host wait kind,
/// a peer that exits cleanly and one that is SIGKILLed, `RUNS` times each (default 20);
/// how long after the event rank 0's wait failed naming it, median and max. A
/// benchmark, not a test of CI: `bench/peer_death.sh` runs it.
#[test]
#[ignore = "benchmark: bench/peer_death.sh runs it"]
fn detection_figures() {
    JOB.print_detection_figures(&WAITS, 10_000);
}
