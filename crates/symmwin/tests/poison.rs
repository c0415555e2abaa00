//! A host signal wait that ends without completing (interrupt, timeout, a peer's
//! SIGKILL) poisons its window on every rank: no later call returns ok with another
//! call's data, every later call on the window fails at once naming the first failure,
//! another window of the group keeps working and so does one made after the free.
//!
//! The matrix: {interrupt, timeout, kill} x {barrier, put_signal into an occupied slot,
//! wait_signal, every host collective op} x world 2 and 3 (a partial post phase needs
//! 3), each job round 0 verified, round 1 the fault (the last rank late, or killed),
//! rounds 2-7 with fresh inputs on every rank. The scenarios live in `poison/`.
#[path = "poison/calls.rs"]
mod calls;
mod common;
#[path = "poison/scenarios.rs"]
mod scenarios;

use std::time::{Duration, Instant};

use common::{field, result, Job};
use symmwin::{adapter::Registry, Allocation, ErrorKind, SignalOptions};

common::worker! {
    "poison_case" => scenarios::poison_case,
    "registry_refuses" => registry_refuses,
    "pool_bounded" => pool_bounded,
}

/// Jobs run side by side, this many at a time (each mostly waits).
const PARALLEL: usize = 6;

/// One job's result lines, by rank (`None`: the rank was killed).
struct Job1 {
    cause: &'static str,
    call: &'static str,
    world: usize,
    lines: Vec<Option<String>>,
}

fn run_one(cause: &'static str, call: &'static str, world: usize) -> Job1 {
    let job = Job::new(&format!("poison-{}-{}", &cause[..3], &call[..3]));
    let env = [
        ("CAUSE", cause.to_owned()),
        ("CALL", call.to_owned()),
        common::timeout_ms(10_000),
    ];
    let outs = job
        .spawn(world, "poison_case", &env)
        .wait(Duration::from_secs(90));
    let lines = outs
        .iter()
        .enumerate()
        .map(|(rank, out)| {
            let killed = cause == "kill" && rank == world - 1;
            if killed {
                return None;
            }
            common::assert_success(out, &format!("{cause} {call} world {world} rank {rank}"));
            Some(result(out))
        })
        .collect();
    Job1 {
        cause,
        call,
        world,
        lines,
    }
}

/// Every job of `cause`, `PARALLEL` at a time.
fn matrix(cause: &'static str) -> Vec<Job1> {
    let cases: Vec<(&'static str, usize)> = calls::CALLS
        .iter()
        .flat_map(|&call| [(call, 2), (call, 3)])
        .collect();
    let mut done = Vec::new();
    for batch in cases.chunks(PARALLEL) {
        let jobs: Vec<Job1> = std::thread::scope(|s| {
            let handles: Vec<_> = batch
                .iter()
                .map(|&(call, world)| s.spawn(move || run_one(cause, call, world)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        done.extend(jobs);
    }
    done
}

fn seconds(line: &str, key: &str) -> f64 {
    field(line, key).parse().unwrap()
}

/// What every job of every cause must show; prints the table the report quotes.
fn check(jobs: &[Job1]) {
    println!("| cause | call | world | rank | round 1 | time to error | verified/refused/wrong | slowest refusal | other window | new window |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for job in jobs {
        let what = format!("{} {} world {}", job.cause, job.call, job.world);
        let firsts: Vec<&str> = job
            .lines
            .iter()
            .flatten()
            .map(|l| field(l, "first"))
            .collect();
        for (rank, line) in job.lines.iter().enumerate() {
            let Some(line) = line else { continue };
            let at = format!("{what} rank {rank}: {line}");
            println!(
                "| {} | {} | {} | {rank} | {} | {} s | {}/{}/{} | {} s | {} | {} |",
                job.cause,
                job.call,
                job.world,
                field(line, "round1"),
                field(line, "round1_s"),
                field(line, "verified"),
                field(line, "refused"),
                field(line, "wrong"),
                field(line, "slowest_refusal_s"),
                field(line, "other"),
                field(line, "fresh"),
            );
            assert_eq!(field(line, "round0"), "verified", "{at}");
            assert_eq!(
                field(line, "wrong"),
                "0",
                "no call returns ok with wrong data: {at}"
            );
            assert_ne!(field(line, "round1"), "WRONG", "{at}");
            assert_eq!(field(line, "verified"), "0", "{at}");
            assert_eq!(field(line, "other_failures"), "0", "{at}");
            assert_eq!(
                field(line, "refused"),
                "6",
                "every later round refused: {at}"
            );
            let slowest = seconds(line, "slowest_refusal_s");
            assert!(slowest < 0.1, "a refusal took {slowest} s: {at}");
            assert_ne!(field(line, "first"), "none", "{at}");
            assert_eq!(
                field(line, "first"),
                firsts[0],
                "every rank names one first failure: {at}"
            );
            check_round1(job, rank, line, &at);
            // With a rank dead, another window's calls fail too: naming the dead rank,
            // or refused once a peer that saw it first poisoned that window as well.
            let (others, fresh): (&[&str], _) = match job.cause {
                "kill" => (&["peer_exited", "poisoned"], "skipped"),
                _ => (&["verified"], "verified"),
            };
            let other = field(line, "other");
            assert!(others.contains(&other), "another window of the group: {at}");
            assert_eq!(
                field(line, "fresh"),
                fresh,
                "a window made after the free: {at}"
            );
        }
    }
}

/// How round 1 ended on `rank`, and how soon.
fn check_round1(job: &Job1, rank: usize, line: &str, at: &str) {
    let round1 = field(line, "round1");
    let took = seconds(line, "round1_s");
    let late = rank == job.world - 1;
    let bystander = matches!(job.call, "put_signal" | "wait_signal") && rank != 0 && !late;
    if bystander {
        assert_eq!(round1, "verified", "{at}");
        return;
    }
    if late {
        // The late rank's call in flight: refused at once, never ok.
        assert_eq!(round1, "poisoned", "{at}");
        assert!(took < 0.1, "{at}");
        return;
    }
    let limit = match job.cause {
        "interrupt" => scenarios::INTERRUPT_AFTER.as_secs_f64() + 0.2,
        "timeout" => scenarios::TIMEOUT.as_secs_f64() + 0.3,
        _ => scenarios::KILL_AFTER.as_secs_f64() + 0.5,
    };
    assert!(took < limit, "round 1 ended after {took} s: {at}");
    if rank == 0 {
        let own = match job.cause {
            "interrupt" => "interrupted",
            "timeout" => "timeout",
            _ => "peer_exited",
        };
        // Rank 0 failed itself, or a peer that failed first poisoned the window.
        assert!([own, "poisoned"].contains(&round1), "{at}");
        if round1 == own {
            assert_eq!(field(line, "round1_poisoned"), "true", "{at}");
        }
    } else {
        assert!(
            ["poisoned", "timeout", "peer_exited"].contains(&round1),
            "{at}"
        );
    }
}

#[test]
fn an_interrupted_wait_poisons_its_window_on_every_rank() {
    check(&matrix("interrupt"));
}

#[test]
fn a_wait_that_times_out_poisons_its_window_on_every_rank() {
    check(&matrix("timeout"));
}

#[test]
fn a_peer_killed_during_a_wait_poisons_the_window_of_the_survivors() {
    check(&matrix("kill"));
}

/// Rank 0's barrier times out alone (rank 1 waits for that on another window, then
/// calls the barrier it skipped); then both ask the registry for the window again.
fn registry_refuses(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    let registry = Registry::new();
    let ptr = registry.alloc(provider.clone(), 16384).unwrap();
    let (w, _) = registry
        .rendezvous(ptr, &group, symmwin::DEFAULT_PAD_SIZE)
        .unwrap()
        .unwrap();
    let other_alloc = Allocation::new(provider, 4096).unwrap();
    let other = group.rendezvous(&other_alloc).unwrap();
    let short = SignalOptions::default().timeout(Duration::from_millis(50));
    let own = if rank == 0 {
        let err = w.barrier(short).unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert!(err.poisoned_window().is_some(), "{err}");
        other.barrier(SignalOptions::default()).unwrap();
        err
    } else {
        other.barrier(SignalOptions::default()).unwrap();
        w.barrier(SignalOptions::default()).unwrap_err()
    };
    let started = Instant::now();
    let again = registry.rendezvous(ptr, &group, symmwin::DEFAULT_PAD_SIZE);
    let refused_in = started.elapsed().as_secs_f64();
    let again = again.map(|_| ()).unwrap_err();
    assert!(matches!(again.kind(), ErrorKind::Poisoned(_)), "{again}");
    drop(w);
    registry.free(ptr).unwrap();
    symmwin::adapter::testing::window_cache::flush();
    let fresh = registry.alloc(group.provider().clone(), 16384).unwrap();
    let (fresh_window, _) = registry
        .rendezvous(fresh, &group, symmwin::DEFAULT_PAD_SIZE)
        .unwrap()
        .unwrap();
    fresh_window.barrier(SignalOptions::default()).unwrap();
    format!(
        "own={} again={} refused_in={refused_in:.4}",
        own.to_string().replace(' ', "_"),
        again.to_string().replace(' ', "_")
    )
}

#[test]
fn the_registry_never_hands_out_a_poisoned_window_again() {
    let job = Job::new("poison-registry");
    let outs = job.run(2, "registry_refuses", &[]);
    common::assert_all_success(&outs);
    for (rank, out) in outs.iter().enumerate() {
        let r = result(out);
        let again = field(&r, "again");
        assert!(
            again.contains("this_window_is_poisoned:_barrier_on_channel_0_timed_out_on_rank_0")
                && again.contains("free_the_tensor"),
            "rank {rank}: {r}"
        );
        assert!(seconds(&r, "refused_in") < 0.1, "rank {rank}: {r}");
        let own = field(&r, "own");
        match rank {
            0 => assert!(
                own.contains("timed_out") && own.contains("now_poisoned"),
                "{r}"
            ),
            _ => assert!(own.contains("this_window_is_poisoned"), "{r}"),
        }
    }
}

/// `CYCLES` times: a window whose barrier rank 0 gives up on at once, the barrier
/// rank 1 then calls refused, both free it; then one good window. Reports the pad
/// pools and cached windows left.
fn pool_bounded(rank: usize, world: usize) -> String {
    let cycles: usize = common::env_usize("CYCLES");
    let (group, provider) = common::join(rank, world);
    let sync_alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let sync = group.rendezvous(&sync_alloc).unwrap();
    let mut refused = 0;
    for _ in 0..cycles {
        let alloc = Allocation::new(provider.clone(), 4096).unwrap();
        let w = group.rendezvous(&alloc).unwrap();
        if rank == 0 {
            let short = SignalOptions::default().timeout(Duration::from_millis(1));
            assert!(w.barrier(short).unwrap_err().poisoned_window().is_some());
            sync.barrier(SignalOptions::default()).unwrap();
        } else {
            sync.barrier(SignalOptions::default()).unwrap();
            let err = w.barrier(SignalOptions::default()).unwrap_err();
            refused += usize::from(matches!(err.kind(), ErrorKind::Poisoned(_)));
        }
    }
    let alloc = Allocation::new(provider, 4096).unwrap();
    let good = group.rendezvous(&alloc).unwrap();
    good.write(1 - rank, 0, &[rank as u8 + 1]).unwrap();
    good.barrier(SignalOptions::default()).unwrap();
    let mut got = [0u8];
    good.read(rank, 0, &mut got).unwrap();
    let (parked, released) = symmwin::adapter::testing::window_cache::counts();
    format!(
        "pools={} refused={refused} got={} parked={parked} released={released}",
        group.pad_pool_count(),
        got[0]
    )
}

#[test]
fn many_poisoned_windows_leave_the_pad_pool_and_the_window_cache_bounded() {
    let cycles = 150;
    let job = Job::new("poison-pool");
    let outs = job.run(2, "pool_bounded", &[("CYCLES", cycles.to_string())]);
    common::assert_all_success(&outs);
    for (rank, out) in outs.iter().enumerate() {
        let r = result(out);
        // 64 slots a pool: without scrubbing, 150 poisoned slots would need 3 pools.
        assert_eq!(field(&r, "pools"), "1", "rank {rank}: {r}");
        assert_eq!(field(&r, "got"), (2 - rank).to_string(), "rank {rank}: {r}");
        // A poisoned window is never parked (nor released for reuse).
        assert_eq!(field(&r, "parked"), "0", "rank {rank}: {r}");
        if rank == 1 {
            assert_eq!(field(&r, "refused"), cycles.to_string(), "{r}");
        }
    }
}
