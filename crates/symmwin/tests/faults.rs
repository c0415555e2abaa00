//! Faults: one rank of four is killed with SIGKILL at each phase of a window's life.
//! Every survivor must get an error naming the lost rank within the configured
//! timeout + 1 s of the death, drop its windows and group without a crash and exit 0.
//! Then a new job (new processes) with the same group name, the same socket
//! directory and a fresh store must start clean and succeed.
//!
//! Run: `cargo test -p symmwin --test faults`.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::hooked_store::{Hooked, StoreHooks};
use common::{assert_all_success, entries, field, result, Job, Ranks, DEFAULT_LIMIT};
use symmwin::SignalOptions;
use symmwin::{Allocation, Error, ErrorKind, FileStore};

const WORLD: usize = 4;
const TIMEOUT_MS: u64 = 1500;

/// Where the victim dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Inside the rendezvous, just before its request reaches the store.
    BeforePublish,
    /// Inside the rendezvous, just after its request reached the store.
    AfterPublish,
    /// After publishing it stops; the parent kills it while peers exchange handles.
    DuringExchange,
    /// After a successful rendezvous, before the first barrier.
    AfterImport,
    /// While the others wait in a barrier; killed by the parent.
    InBarrier,
}

impl Fault {
    fn parse(s: &str) -> Fault {
        match s {
            "before_publish" => Fault::BeforePublish,
            "after_publish" => Fault::AfterPublish,
            "during_exchange" => Fault::DuringExchange,
            "after_import" => Fault::AfterImport,
            "in_barrier" => Fault::InBarrier,
            other => panic!("unknown fault {other}"),
        }
    }

    /// Does the parent (rather than the victim itself) deliver the SIGKILL?
    fn parent_kills(self) -> bool {
        matches!(self, Fault::DuringExchange | Fault::InBarrier)
    }
}

fn kill_self() -> ! {
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
        .unwrap();
    unreachable!("SIGKILL returned");
}

/// Tell the parent we reached the point where it should kill us, then wait for it.
fn wait_to_be_killed() -> ! {
    std::fs::write(marker(), b"ready").unwrap();
    std::thread::sleep(Duration::from_secs(60));
    panic!("the parent never killed us");
}

fn marker() -> PathBuf {
    PathBuf::from(std::env::var("MARKER").unwrap())
}

/// The victim's store hooks: a death around the first publish.
struct FaultHooks {
    fault: Fault,
}

/// A laggard's store hooks: once it has read `after` of its peers' requests it
/// stalls, so that it goes on only after the peers that saw the victim die gave the
/// call up and exited (their keys taken back, their sockets gone, their notices
/// queued here).
struct LaggardHooks {
    own_key: String,
    after: usize,
    seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl StoreHooks for LaggardHooks {
    fn after_get(&self, key: &str, value: Option<&[u8]>) {
        if !key.contains("/req/") || key.ends_with(&self.own_key) || value.is_none() {
            return;
        }
        let mut seen = self.seen.lock().unwrap();
        if seen.insert(key.to_owned()) && seen.len() == self.after {
            std::thread::sleep(LAG);
        }
    }
}

/// Where a laggard stalls: rank `rank`, after reading `after` peers' requests.
#[derive(Debug, Clone, Copy)]
struct Laggard {
    rank: usize,
    after: usize,
}

impl Laggard {
    fn from_env() -> Option<Laggard> {
        let spec = std::env::var("LAGGARD").ok()?;
        let (rank, after) = spec.split_once(':')?;
        Some(Laggard {
            rank: rank.parse().ok()?,
            after: after.parse().ok()?,
        })
    }

    fn to_env(self) -> (&'static str, String) {
        ("LAGGARD", format!("{}:{}", self.rank, self.after))
    }
}

/// How long the laggard stalls: long enough for the others to fail and exit.
const LAG: Duration = Duration::from_millis(400);

impl StoreHooks for FaultHooks {
    fn before_set(&self, key: &str, _value: &[u8]) {
        if key.contains("/req/") && self.fault == Fault::BeforePublish {
            kill_self();
        }
    }

    fn after_set(&self, key: &str) {
        match self.fault {
            Fault::AfterPublish if key.contains("/req/") => kill_self(),
            Fault::DuringExchange if key.contains("/req/") => wait_to_be_killed(),
            _ => {}
        }
    }
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

common::worker! {
    "fault" => fault,
    "fresh" => fresh,
    "lagging" => lagging,
}

/// Does `message` name rank `victim`: as the peer, or in a list of ranks?
fn message_names(message: &str, victim: usize) -> bool {
    if message.contains(&format!("peer {victim}:")) || message.contains(&format!("rank {victim} "))
    {
        return true;
    }
    message.match_indices("rank(s) [").any(|(at, prefix)| {
        let rest = &message[at + prefix.len()..];
        let list = &rest[..rest.find(']').unwrap_or(0)];
        list.split(", ").any(|r| r == victim.to_string())
    })
}

/// A survivor's report of the error it got.
fn report(err: &Error, victim: usize, started: Instant) -> String {
    // Named as the peer, as the one rank a timeout waited for, or (when several peers
    // were unreachable, the first survivors to notice having left already) among them.
    let named = err.peer() == Some(victim)
        || matches!(err.kind(), ErrorKind::Timeout { missing, .. } if missing == &[victim])
        || matches!(err.kind(), ErrorKind::PeerLost(m) if message_names(m, victim));
    format!(
        "at={} elapsed={:.3} phase={} peer={:?} named={named} timeout={} msg={err}",
        unix_ms(),
        started.elapsed().as_secs_f64(),
        err.phase(),
        err.peer(),
        err.is_timeout(),
    )
}

fn fault(rank: usize, world: usize) -> String {
    let fault = Fault::parse(&std::env::var("FAULT").unwrap());
    let victim = common::env_usize("VICTIM");
    let (group, provider) = join_hooked(rank, world, Some((victim, fault)));
    let alloc = Allocation::new(provider, 1 << 20).unwrap();
    let started = Instant::now();
    let window = match group.rendezvous(&alloc) {
        Ok(window) => window,
        Err(err) => {
            assert_ne!(rank, victim, "the victim must not get this far: {err}");
            drop(alloc);
            drop(group);
            return report(&err, victim, started);
        }
    };
    // Everyone mapped everything; write into the victim's slot to show it stays usable.
    window.write(victim, rank, &[rank as u8 + 1]).unwrap();
    if rank == victim {
        match fault {
            Fault::AfterImport => kill_self(),
            Fault::InBarrier => {
                window.barrier(SignalOptions::default()).unwrap();
                wait_to_be_killed();
            }
            other => panic!("the victim of {other:?} got a window"),
        }
    }
    if fault == Fault::InBarrier {
        window.barrier(SignalOptions::default()).unwrap();
    }
    let started = Instant::now();
    let err = window.barrier(SignalOptions::channel(1)).unwrap_err();
    // The dead rank's memory stays mapped here until we let go of it.
    let mut byte = [0u8];
    window.read(victim, rank, &mut byte).unwrap();
    assert_eq!(byte[0], rank as u8 + 1);
    drop(window);
    drop(alloc);
    drop(group);
    report(&err, victim, started)
}

/// Join the test's group with the victim's and the laggard's store hooks where this
/// rank is one of them.
fn join_hooked(
    rank: usize,
    world: usize,
    victim: Option<(usize, Fault)>,
) -> (symmwin::Group, Arc<dyn symmwin::Provider>) {
    let laggard = Laggard::from_env().filter(|l| l.rank == rank);
    common::join_wrapped("test", rank, world, |inner| match (victim, laggard) {
        (Some((victim, fault)), _) if victim == rank => Arc::new(Hooked {
            inner,
            hooks: FaultHooks { fault },
        }),
        (_, Some(lag)) => Arc::new(Hooked {
            inner,
            hooks: LaggardHooks {
                own_key: format!("/req/{rank}"),
                after: lag.after,
                seen: Default::default(),
            },
        }),
        _ => Arc::new(inner),
    })
}

/// A new job after a fault: a rendezvous, an all-to-all write, barriers.
fn fresh(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    exchange_and_check(&group, provider)
}

/// No fault, but a laggard: the handles the others sent while it gathered are held and
/// accepted once its exchange starts.
fn lagging(rank: usize, world: usize) -> String {
    let (group, provider) = join_hooked(rank, world, None);
    exchange_and_check(&group, provider)
}

/// A rendezvous, an all-to-all write, barriers: how many bytes came back wrong.
fn exchange_and_check(group: &symmwin::Group, provider: Arc<dyn symmwin::Provider>) -> String {
    let (rank, world) = (group.rank(), group.world());
    let alloc = Allocation::new(provider, 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    for peer in 0..world {
        window.write(peer, rank, &[rank as u8 + 1]).unwrap();
    }
    window.barrier(SignalOptions::default()).unwrap();
    let mut got = vec![0u8; world];
    window.read(rank, 0, &mut got).unwrap();
    window.barrier(SignalOptions::channel(1)).unwrap();
    let wrong = (0..world).filter(|&r| got[r] != r as u8 + 1).count();
    format!("wrong={wrong}")
}

/// Run one fault, check the survivors, then start a fresh job on the same sockets.
fn run_fault(name: &str, victim: usize) {
    run_fault_with(name, victim, None);
}

/// [`run_fault`], with a laggard (if any) that stalls in the gather.
fn run_fault_with(name: &str, victim: usize, laggard: Option<Laggard>) {
    let fault = Fault::parse(name);
    // The job's directory holds its sockets: its name stays short (`sun_path` is 108 bytes).
    let job = Job::new(if laggard.is_some() { "laggard" } else { name });
    let marker = job.dir.join("victim-ready");
    let mut env = vec![
        common::timeout_ms(TIMEOUT_MS),
        ("FAULT", name.to_owned()),
        ("VICTIM", victim.to_string()),
        ("MARKER", marker.display().to_string()),
    ];
    env.extend(laggard.map(Laggard::to_env));
    let mut ranks = job.spawn(WORLD, "fault", &env);
    let victim_pid = ranks.pid(victim);
    let died_at = await_death(&mut ranks, victim, fault, &marker);
    let outs = ranks.wait(DEFAULT_LIMIT);

    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        outs[victim].status.signal(),
        Some(libc::SIGKILL),
        "victim: {}",
        String::from_utf8_lossy(&outs[victim].stderr)
    );
    let survivors: Vec<_> = (0..WORLD).filter(|&r| r != victim).collect();
    assert_all_success(
        &survivors
            .iter()
            .map(|&r| outs[r].clone())
            .collect::<Vec<_>>(),
    );
    let limit = TIMEOUT_MS as f64 / 1000.0 + 1.0;
    for &rank in &survivors {
        let r = result(&outs[rank]);
        assert_eq!(
            field(&r, "named"),
            "true",
            "rank {rank} must name {victim}: {r}\n{}",
            String::from_utf8_lossy(&outs[rank].stderr)
        );
        let msg = r.split_once("msg=").unwrap().1;
        assert!(
            message_names(msg, victim),
            "the message must name rank {victim}: {msg}"
        );

        let at: u128 = field(&r, "at").parse().unwrap();
        let after_death = at.saturating_sub(died_at) as f64 / 1000.0;
        eprintln!("{name}: rank {rank}: {after_death:.3} s after the death: {r}");
        assert!(
            after_death <= limit,
            "rank {rank} reported {after_death:.3} s after the death (limit {limit} s): {r}"
        );
        // The peers that gave up told the laggard so: it does not wait out its timeout.
        if laggard.is_some_and(|l| l.rank == rank) {
            assert!(
                after_death <= 1.0,
                "the laggard reported {after_death:.3} s after the death: {r}"
            );
        }
        let elapsed: f64 = field(&r, "elapsed").parse().unwrap();
        // A rendezvous waits at most one timeout to gather and one to exchange.
        assert!(
            elapsed <= 2.0 * limit,
            "rank {rank} waited {elapsed} s: {r}"
        );
    }

    // Survivors removed their sockets; the dead rank's may be left (unless a rank
    // that started after the death already swept it away as stale).
    let left: Vec<String> = std::fs::read_dir(job.sockets())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter()
            .all(|s| s.starts_with(&format!("{victim_pid}-"))),
        "{left:?}"
    );
    eprintln!("{name}: stale sockets before the new job: {}", left.len());

    // A new job: same group name, same socket directory, fresh store.
    std::fs::rename(job.store(), job.dir.join("store.old")).unwrap();
    let outs = job.run(WORLD, "fresh", &[common::timeout_ms(TIMEOUT_MS)]);
    assert_all_success(&outs);
    for out in &outs {
        assert_eq!(result(out), "wrong=0");
    }
    assert_eq!(
        entries(&job.sockets()),
        0,
        "the stale socket was not cleaned up"
    );
    assert!(FileStore::new(job.store()).unwrap().is_empty().unwrap());
}

/// Wait for the victim to die (killing it when the parent is the killer); when it died.
fn await_death(ranks: &mut Ranks, victim: usize, fault: Fault, marker: &std::path::Path) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(30);
    if fault.parent_kills() {
        while !marker.exists() {
            assert!(Instant::now() < deadline, "the victim never got ready");
            assert!(
                ranks.try_status(victim).is_none(),
                "the victim exited early"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Let the survivors get into the exchange or the barrier.
        std::thread::sleep(Duration::from_millis(200));
        ranks.kill(victim);
    }
    while ranks.try_status(victim).is_none() {
        assert!(Instant::now() < deadline, "the victim never died");
        std::thread::sleep(Duration::from_millis(2));
    }
    unix_ms()
}

#[test]
fn kill_before_publishing() {
    run_fault("before_publish", 0);
}

#[test]
fn kill_after_publishing() {
    run_fault("after_publish", 3);
}

/// The peers that saw the victim die gave the call up and exited before the laggard
/// sent them anything: it must name the victim (from their notices), not them, within
/// a second.
#[test]
fn kill_after_publishing_while_a_laggard_gathers() {
    let laggard = Laggard {
        rank: 0,
        after: WORLD - 1,
    };
    run_fault_with("after_publish", 3, Some(laggard));
}

/// The laggard read one request; the peers that gave up took theirs back meanwhile: it
/// must name the victim within a second, not wait its whole timeout for keys that are
/// gone.
#[test]
fn kill_after_publishing_while_a_laggard_reads_the_first_request() {
    let laggard = Laggard { rank: 0, after: 1 };
    run_fault_with("after_publish", 3, Some(laggard));
}

/// Without a fault, a laggard's gather holds what the others sent meanwhile: the
/// rendezvous succeeds on every rank.
#[test]
fn a_laggard_gets_what_came_while_it_gathered() {
    let job = Job::new("lagging");
    let laggard = Laggard { rank: 0, after: 1 };
    let env = [common::timeout_ms(TIMEOUT_MS), laggard.to_env()];
    let outs = job.run(WORLD, "lagging", &env);
    assert_all_success(&outs);
    for out in &outs {
        assert_eq!(result(out), "wrong=0");
    }
}

#[test]
fn kill_during_the_fd_exchange() {
    run_fault("during_exchange", 1);
}

#[test]
fn kill_after_import_before_the_first_barrier() {
    run_fault("after_import", 2);
}

#[test]
fn kill_inside_a_barrier() {
    run_fault("in_barrier", 0);
}
