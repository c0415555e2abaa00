//! Ranks that leave around a group's first rendezvous are named, each with the right
//! error, on every survivor: one that started the rendezvous and exits (or is killed)
//! before publishing its request is named within a second (its join record); one that
//! never reached symmwin, at the timeout; one that dies after publishing, as exited,
//! never as a stale store. And a group spanning hosts with no process-group backend is
//! refused alike by every rank at the rendezvous. World-3 jobs of worker processes on
//! the host provider; rank 2 is the one that leaves.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::hooked_store::{Hooked, StoreHooks};
use common::peer_jobs::{failed_wait, unix_ms};
use common::{field, result, Job};
use symmwin::{Allocation, ErrorKind, SignalOptions, Store};

common::worker! {
    "first_rendezvous" => first_rendezvous,
    "no_backend" => no_backend,
}

const WORLD: usize = 3;
const LEAVER: usize = WORLD - 1;

/// Rank 2 leaves its first rendezvous as `LEAVE` says (see [`Leave`]; `never`: exits
/// without reaching symmwin), with `LATE` set only once the others wait in theirs; the
/// other ranks take part and report how their rendezvous ended and when.
fn first_rendezvous(rank: usize, world: usize) -> String {
    if rank == LEAVER {
        if std::env::var("LATE").is_ok() {
            wait_for_the_others_requests();
        }
        let leave = Leave::from_env(rank);
        let Some(leave) = leave else {
            std::process::exit(3);
        };
        let (group, provider) = common::join_wrapped("test", rank, world, |files| {
            Arc::new(Hooked {
                inner: files,
                hooks: leave,
            })
        });
        let alloc = Allocation::new(provider, 4096).unwrap();
        let _ = group.rendezvous(&alloc);
        panic!("rank {rank} was to leave its rendezvous");
    }
    let (group, provider) = common::join(rank, world);
    let alloc = Allocation::new(provider, 4096).unwrap();
    let started = Instant::now();
    let err = group.rendezvous(&alloc).unwrap_err();
    let exited = match err.kind() {
        ErrorKind::PeerExited { rank, .. } => format!("rank{rank}"),
        _ => "no".into(),
    };
    failed_wait(&err, started, &exited)
}

/// Wait (10 s at most) until every other rank has published its request, so that it
/// waits in its gather, its call begun, when this rank joins.
fn wait_for_the_others_requests() {
    let store = common::job_store();
    let ns = symmwin::adapter::testing::Namespace::new("test");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (0..LEAVER).any(|r| store.try_get(&ns.request(0, r)).unwrap().is_none()) {
        assert!(Instant::now() < deadline, "the other ranks never published");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Where rank 2 leaves (`LEAVE` = `<where>:<how>`): `before` its request is set (after
/// its join record) or `after` it; `hold` (write `READY` and sleep until the test
/// kills it) or `exit` (write the time to `READY` and exit 0).
struct Leave {
    key: String,
    before: bool,
    hold: bool,
}

impl Leave {
    fn from_env(rank: usize) -> Option<Leave> {
        let leave = std::env::var("LEAVE").unwrap();
        let (at, how) = leave.split_once(':')?;
        Some(Leave {
            key: symmwin::adapter::testing::Namespace::new("test").request(0, rank),
            before: at == "before",
            hold: how == "hold",
        })
    }

    fn leave(&self) {
        let ready = std::env::var("READY").unwrap();
        if self.hold {
            std::fs::write(ready, b"").unwrap();
            std::thread::sleep(Duration::from_secs(60));
        } else {
            std::fs::write(ready, unix_ms().to_string()).unwrap();
        }
        std::process::exit(0);
    }
}

impl StoreHooks for Leave {
    fn before_set(&self, key: &str, _value: &[u8]) {
        if self.before && key == self.key {
            self.leave();
        }
    }

    fn after_set(&self, key: &str) {
        if !self.before && key == self.key {
            self.leave();
        }
    }
}

/// Run a world-3 job whose rank 2 leaves as `leave` says (`late`: once the others
/// wait), with timeout `timeout_ms`; a held rank 2 is killed a second after it is ready.
/// The survivors' result lines and when rank 2 left (unix ms).
fn leave_job(leave: &str, late: bool, timeout_ms: u64) -> (Vec<String>, u128) {
    // Short: the job's directory holds the socket paths, which must fit 107 bytes.
    let job = Job::new(&format!("dp{}", &leave[..2]));
    let ready = job.dir.join("ready");
    let mut env = vec![
        ("LEAVE", leave.to_owned()),
        ("READY", ready.display().to_string()),
        common::timeout_ms(timeout_ms),
    ];
    if late {
        env.push(("LATE", "1".into()));
    }
    let mut ranks = job.spawn(WORLD, "first_rendezvous", &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = None;
    if leave != "never" {
        while !ready.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if leave.ends_with(":hold") {
            // Long enough for every survivor to have looked at rank 2 while it runs.
            std::thread::sleep(Duration::from_secs(1));
            left = Some(unix_ms());
            ranks.kill(LEAVER);
        } else {
            std::thread::sleep(Duration::from_millis(20));
            left = std::fs::read_to_string(&ready)
                .ok()
                .and_then(|t| t.parse().ok());
        }
    }
    let outs = ranks.wait(Duration::from_secs(60));
    let survivors = outs[..LEAVER]
        .iter()
        .enumerate()
        .map(|(rank, out)| {
            common::assert_success(out, &format!("rank {rank}"));
            result(out)
        })
        .collect();
    (survivors, left.unwrap_or_else(unix_ms))
}

/// Seconds from `left` to the end of the wait `r` reports.
fn after(r: &str, left: u128) -> f64 {
    (field(r, "at").parse::<i128>().unwrap() - left as i128) as f64 / 1000.0
}

/// Every survivor names rank 2 as exited, within a second of `left`, in `phase`.
fn assert_named_in_time(case: &str, survivors: &[String], left: u128, phase: &str) {
    for r in survivors {
        assert_eq!(field(r, "exited"), "rank2", "{r}");
        let late = after(r, left);
        eprintln!("{case}: named {late:.3} s after rank 2 left: {r}");
        assert!(late < 1.0, "named {late} s after rank 2 left: {r}");
        let msg = field(r, "msg");
        assert!(msg.contains(&format!("[{phase}]_peer_2:")), "{r}");
        assert!(msg.contains("rank_2_(pid_"), "{r}");
        assert!(!msg.contains("stale"), "{r}");
    }
}

#[test]
fn a_rank_that_leaves_inside_the_first_rendezvous_is_named_within_a_second_not_stale() {
    for (case, exits, phase) in [
        // Killed after joining, before its request.
        ("before:hold", false, "gather"),
        // Rank 2 joins while the others wait, and exits at once: no look saw it
        // running, but its record was written during their call.
        ("before:exit", true, "gather"),
        // Killed after its request.
        ("after:hold", false, "exchange"),
        // Its request is written during the others' call: a death, not a stale store.
        ("after:exit", true, "exchange"),
    ] {
        let (survivors, left) = leave_job(case, exits, 5000);
        assert_named_in_time(case, &survivors, left, phase);
    }
}

#[test]
fn a_rank_that_never_reached_symmwin_is_named_at_the_timeout() {
    let (survivors, _) = leave_job("never", false, 1500);
    for r in &survivors {
        let waited: f64 = field(r, "waited").parse().unwrap();
        assert!((1.4..5.0).contains(&waited), "{r}");
        assert_eq!(field(r, "timeout"), "true", "{r}");
        assert!(field(r, "msg").contains("waiting_for_rank(s)_[2]"), "{r}");
    }
}

/// Every rank on the "host" `HOSTS` names for it (`SYMMWIN_HOST_ID`), none with a
/// process-group backend: where its first rendezvous, or else its first barrier,
/// failed, after how long, and the message.
fn no_backend(rank: usize, world: usize) -> String {
    let hosts = std::env::var("HOSTS").unwrap();
    let host = hosts.split(',').nth(rank).unwrap();
    // A worker process is single-threaded here, before symmwin reads its settings.
    std::env::set_var("SYMMWIN_HOST_ID", host);
    let (group, provider) = common::join(rank, world);
    let alloc = Allocation::new(provider, 4096).unwrap();
    let started = Instant::now();
    let (at, err) = match group.rendezvous(&alloc) {
        Err(e) => ("rendezvous", e),
        Ok(window) => (
            "barrier",
            window.barrier(SignalOptions::default()).unwrap_err(),
        ),
    };
    format!(
        "where={at} waited={:.3} unsupported={} msg={}",
        started.elapsed().as_secs_f64(),
        matches!(err.kind(), ErrorKind::Unsupported(_)),
        err.to_string().replace(' ', "_")
    )
}

#[test]
fn a_group_spanning_hosts_without_a_backend_is_refused_at_the_rendezvous_on_every_rank() {
    let job = Job::new("dpnb");
    let env = [("HOSTS", "a,a,b".to_owned()), common::timeout_ms(4000)];
    let outs = job.run(WORLD, "no_backend", &env);
    for (rank, out) in outs.iter().enumerate() {
        common::assert_success(out, &format!("rank {rank}"));
        let r = result(out);
        assert_eq!(field(&r, "where"), "rendezvous", "{r}");
        assert_eq!(field(&r, "unsupported"), "true", "{r}");
        let waited: f64 = field(&r, "waited").parse().unwrap();
        assert!(waited < 3.0, "a refusal, not a timeout: {r}");
        let msg = field(&r, "msg").replace('_', " ");
        assert!(
            msg.starts_with(&format!("symmwin rank {rank} [gather]")),
            "{r}"
        );
        assert!(
            msg.contains(
                "rank(s) [0, 1, 2] have no process-group backend to reach the ranks they \
                 cannot map (rank 0 cannot map [2]; rank 1 cannot map [2]; rank 2 cannot \
                 map [0, 1]"
            ),
            "{r}"
        );
        assert!(msg.contains("set remote peers"), "{r}");
    }
}
