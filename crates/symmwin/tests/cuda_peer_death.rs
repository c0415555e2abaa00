//! A local peer that exits (cleanly or killed) while a rank's kernel waits for it (a
//! device barrier, a device signal wait, a device op) is named within a second plus the
//! trap's delivery, through the exit marks the host's watcher writes for the kernel to
//! read; one that is stopped (alive but slow) gets the whole timeout. Each case is one
//! world-2 job of worker processes on the CUDA provider (both ranks may share a GPU).
//!
//! Needs a CUDA GPU: `cargo test -p symmwin --test cuda_peer_death -- --ignored`.

mod common;

use std::time::{Duration, Instant};

use common::field;
use common::peer_jobs::{failed_wait, rank_1_leaves, seconds_after as after, PeerJob};
use symmwin::{
    ops::{OpOptions, Operand, Rows, Shape},
    Allocation, ErrorKind, SignalOptions, Stream,
};

common::worker! { "wait_on_device" => wait_on_device }

/// Both ranks make one window (so each knows the other's pid); then rank 1 does what
/// `PEER` says (`exit`: exits 0; `hold`: sleeps, for the test to kill or stop) and rank
/// 0 launches the device wait `WAIT` for it and synchronizes, reporting how the wait
/// ended and when.
fn wait_on_device(rank: usize, world: usize) -> String {
    let (group, provider) = common::join_cuda("cuda-peer-death", rank, world);
    let alloc = Allocation::new(provider, 1 << 21).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    let half = Operand::new(&window, 0, 4096);
    let other = Operand::new(&window, 4096, 4096);
    // Load the kernels (the first op compiles its module, which can take a second) and
    // make sure nothing on the device waits before both ranks are here.
    symmwin::ops::all_to_all(half, other, 4, &OpOptions::default()).unwrap();
    // all_to_all_vdev's split table: zero rows for every rank.
    window.write(rank, 8192, &[0u8; 16]).unwrap();
    window.barrier(SignalOptions::default()).unwrap();
    window.synchronize(Stream::DEFAULT).unwrap();
    if rank == 1 {
        rank_1_leaves();
    }
    let started = Instant::now();
    let launched = match std::env::var("WAIT").unwrap().as_str() {
        "barrier" => window.barrier(SignalOptions::default()),
        "wait_signal" => window.wait_signal(1, SignalOptions::default()),
        "all_to_all" => symmwin::ops::all_to_all(half, other, 4, &OpOptions::default()),
        // Zero splits (the window is zeroed): the wait is the ready signal every block
        // of the one all_to_all_vdev kernel looks for.
        "all_to_all_vdev" => symmwin::ops::all_to_all_v(
            Shape::Flat,
            half,
            other,
            Operand::new(&window, 8192, 16),
            Operand::new(&window, 8192 + 64, 32),
            Rows {
                row_bytes: 16,
                in_rows: 256,
                out_rows: 256,
            },
            &OpOptions::default(),
        ),
        other => panic!("unknown wait {other}"),
    };
    let err = launched
        .and_then(|()| window.synchronize(Stream::DEFAULT))
        .unwrap_err();
    let exited = match err.kind() {
        ErrorKind::ContextLost(t) => match (&t.exited, t.missing.first()) {
            (Some(exit), Some(peer)) => format!("rank{peer}:{}", exit.how.replace(' ', "_")),
            _ => "no".into(),
        },
        _ => "no".into(),
    };
    failed_wait(&err, started, &exited)
}

/// The jobs of these tests; rank 0's kernel gets time to start waiting before rank 1
/// is acted on.
const JOB: PeerJob = PeerJob {
    worker: "wait_on_device",
    settle: Duration::from_millis(200),
};

/// Every device wait kind.
const WAITS: [&str; 4] = ["barrier", "wait_signal", "all_to_all", "all_to_all_vdev"];

/// Named within a second, plus the trap's delivery (its printf flush takes 1 ms).
const NAMED_WITHIN: f64 = 1.1;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_peer_that_exits_is_named_within_a_second_in_every_device_wait() {
    for wait in WAITS {
        let (r, _) = JOB.run((wait, "exit"), 30_000, |_| {});
        assert_eq!(field(&r, "exited"), "rank1:exited", "{wait}: {r}");
        assert_eq!(field(&r, "lost"), "true", "{wait}: {r}");
        assert_eq!(field(&r, "peer"), "Some(1)", "{wait}: {r}");
        let waited: f64 = field(&r, "waited").parse().unwrap();
        assert!(waited < NAMED_WITHIN, "{wait}: {r}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_killed_peer_is_named_within_a_second_in_every_device_wait() {
    for wait in WAITS {
        let (r, acted) = JOB.run((wait, "hold"), 30_000, |ranks| ranks.kill(1));
        assert_eq!(field(&r, "exited"), "rank1:exited", "{wait}: {r}");
        assert!(field(&r, "msg").contains("(pid_"), "{wait}: {r}");
        let late = after(&r, acted);
        assert!(
            late < NAMED_WITHIN,
            "{wait}: named {late} s after the kill: {r}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stopped_peer_gets_the_whole_timeout_in_every_device_wait() {
    JOB.stopped_peer_gets_the_whole_timeout(&WAITS, |r| field(r, "msg").contains("timed_out"));
}

/// The device rows of docs/RELIABILITY.md's detection table: for each device wait kind,
/// a peer that exits cleanly and one that is SIGKILLed, `RUNS` times each (default 20);
/// how long after the event rank 0's synchronize failed naming it (the trap's delivery
/// included), median and max. A benchmark: `bench/peer_death.sh --cuda` runs it.
#[test]
#[ignore = "benchmark (needs a CUDA GPU): bench/peer_death.sh --cuda runs it"]
fn detection_figures() {
    JOB.print_detection_figures(&WAITS, 30_000);
}
