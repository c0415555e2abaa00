//! All or nothing: a rendezvous returns on every rank with windows of the same call,
//! or fails; after a failure the group is out of step and says so at once; memory
//! whose offer or handle went out in a failed call is never handed out again; a peer
//! can queue only so much ahead; a rank that gives up leaves no store key behind.
//!
//! Ranks are threads of this process, each with its own host provider (the window
//! cache hands memory back only to the provider it came from).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use symmwin::adapter::testing::page_size;
use symmwin::adapter::testing::Namespace;
use symmwin::adapter::testing::{nonzero_bytes, Endpoint, FABRIC_LEN};
use symmwin::{
    Allocation, Config, ErrorKind, Group, GroupSpec, HostProvider, MemoryStore, Provider, Store,
    Window,
};

/// The tests run one at a time: one of them counts this process's open descriptors.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

const TIMEOUT: Duration = Duration::from_millis(300);

struct Ranks {
    store: Arc<MemoryStore>,
    groups: Vec<Group>,
    providers: Vec<Arc<dyn Provider>>,
}

/// `world` ranks of group `name` on one memory store, with a short timeout.
fn ranks(name: &str, world: usize) -> Ranks {
    let store = Arc::new(MemoryStore::new());
    let mut config = Config::from_env().unwrap();
    config.timeout = TIMEOUT;
    let providers: Vec<Arc<dyn Provider>> = (0..world)
        .map(|_| Arc::new(HostProvider::new()) as Arc<dyn Provider>)
        .collect();
    let groups = (0..world)
        .map(|rank| {
            let spec = GroupSpec::new(name, rank, world);
            Group::new(spec, store.clone(), providers[rank].clone(), &config).unwrap()
        })
        .collect();
    Ranks {
        store,
        groups,
        providers,
    }
}

impl Ranks {
    /// Ranks `who` rendezvous `bytes` each at once: each one's allocation and result.
    fn rendezvous(
        &self,
        who: &[usize],
        bytes: usize,
    ) -> Vec<(Allocation, symmwin::Result<Window>)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = who
                .iter()
                .map(|&r| {
                    s.spawn(move || {
                        let alloc = Allocation::new(self.providers[r].clone(), bytes).unwrap();
                        let result = self.groups[r].rendezvous(&alloc);
                        (alloc, result)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Every rank rendezvous `bytes` and must succeed.
    fn all_ok(&self, bytes: usize) -> Vec<(Allocation, Window)> {
        let every: Vec<usize> = (0..self.groups.len()).collect();
        self.rendezvous(&every, bytes)
            .into_iter()
            .map(|(a, w)| (a, w.unwrap()))
            .collect()
    }
}

/// The out-of-step error's call and rank.
fn out_of_step(result: &symmwin::Result<Window>) -> (u64, usize) {
    match result {
        Err(e) => match e.kind() {
            ErrorKind::OutOfStep { since, rank, .. } => (*since, *rank),
            _ => panic!("expected out of step, got {e}"),
        },
        Ok(_) => panic!("expected out of step, got a window"),
    }
}

/// Rank 1 makes one rendezvous alone (as when rank 0's op refused its arguments before
/// its implicit rendezvous), then both make P and Q of the same size. Before, rank 0's
/// P mapped rank 1's abandoned memory and its Q rank 1's P, every call said ok, and a
/// write by rank 0 into rank 1's slot of Q landed in rank 1's P.
#[test]
fn a_call_one_rank_gave_up_is_never_paired_with_another_rank_s_next_call() {
    let _alone = alone();
    let ranks = ranks("skew", 2);
    let size = page_size();
    drop(ranks.all_ok(size)); // the group's first rendezvous, through the store
    drop(ranks.all_ok(size)); // and one over the sockets
    let alone = ranks.rendezvous(&[1], size);
    assert!(alone[0].1.as_ref().unwrap_err().is_timeout());

    let p = ranks.rendezvous(&[0, 1], size);
    let gave_up = out_of_step(&p[1].1);
    assert_eq!(gave_up.1, 1, "rank 1 names its own call");
    for (rank, (_, result)) in p.iter().enumerate() {
        assert_eq!(out_of_step(result), gave_up, "rank {rank}");
        let text = result.as_ref().err().unwrap().to_string();
        let since = format!("out of step since rendezvous {} on rank 1", gave_up.0);
        assert!(
            text.contains(&since) && text.contains("destroy_process_group"),
            "rank {rank}: {text}"
        );
    }
    let started = Instant::now();
    let q = ranks.rendezvous(&[0, 1], size);
    assert!(started.elapsed() < TIMEOUT / 2, "later calls fail at once");
    for (_, result) in &q {
        assert_eq!(out_of_step(result), gave_up);
    }
}

/// A rank whose rendezvous fails after its first message went out tells its peers, so a
/// peer that comes later fails that call (instead of completing it from the queued
/// message) and every later one, naming the rank that gave up.
#[test]
fn a_peer_that_comes_after_a_rank_gave_up_fails_that_call_and_the_next_at_once() {
    let _alone = alone();
    let ranks = ranks("late-peer", 3);
    let size = page_size();
    drop(ranks.all_ok(size));
    drop(ranks.all_ok(size));
    // Ranks 0 and 1 come; rank 2 does not: the first of them to time out gives the
    // call up, and the other hears it (or times out too).
    let came = ranks.rendezvous(&[0, 1], size);
    let errors: Vec<_> = came.iter().map(|(_, r)| r.as_ref().unwrap_err()).collect();
    assert!(errors.iter().any(|e| e.is_timeout()), "{errors:?}");
    let late = ranks.rendezvous(&[2], size);
    let (since, culprit) = out_of_step(&late[0].1);
    assert!(culprit < 2, "rank 2 names a rank that gave up, not itself");
    let started = Instant::now();
    for (_, result) in ranks.rendezvous(&[0, 1, 2], size) {
        assert_eq!(out_of_step(&result).0, since);
    }
    assert!(started.elapsed() < TIMEOUT / 2);
}

/// Disagreeing requests are refused alike on every rank, which keeps the group in step:
/// the next rendezvous works.
#[test]
fn a_disagreement_every_rank_sees_keeps_the_group_in_step() {
    let _alone = alone();
    let ranks = ranks("disagree", 2);
    drop(ranks.all_ok(page_size()));
    drop(ranks.all_ok(page_size()));
    let sizes = [page_size(), 2 * page_size()];
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let ranks = &ranks;
                s.spawn(move || {
                    let alloc = Allocation::new(ranks.providers[r].clone(), sizes[r]).unwrap();
                    ranks.groups[r].rendezvous(&alloc).map(drop)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        let text = result.unwrap_err().to_string();
        assert!(text.contains("ranks disagree on size"), "{text}");
    }
    drop(ranks.all_ok(page_size()));
}

/// Rank 0 takes a released window over and offers it in a rendezvous that times out;
/// rank 1 may complete that call from the queued offer and write into rank 0's slot,
/// so rank 0's memory never goes back to the cache. Before, the window went back, was
/// zeroed and handed to rank 0's next allocation of that size, which rank 1 then wrote.
#[test]
fn memory_offered_in_a_call_that_failed_is_never_handed_out_again() {
    let _alone = alone();
    let ranks = ranks("offered", 2);
    let size = 3 * page_size();
    // A window of `size`, freed on both ranks, released by the next rendezvous.
    let first = ranks.all_ok(size);
    for (alloc, window) in &first {
        window.write(0, 0, &[1; 16]).unwrap();
        let _ = alloc;
    }
    drop(first);
    drop(ranks.all_ok(page_size()));

    let taken = Allocation::new(ranks.providers[0].clone(), size).unwrap();
    assert!(taken.is_reused(), "the released window is handed out");
    let err = ranks.groups[0].rendezvous(&taken).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(taken.was_shared_in_failed_call());
    drop(taken);

    let next = Allocation::new(ranks.providers[0].clone(), size).unwrap();
    assert!(
        !next.is_reused(),
        "memory offered in a failed call came back from the cache"
    );
    // SAFETY: host provider memory, mapped while `next` lives.
    assert_eq!(unsafe { nonzero_bytes(&next) }, 0);
    // The peer that comes later hears that rank 0 gave the call up.
    let late = ranks.rendezvous(&[1], size);
    assert_eq!(out_of_step(&late[0].1).1, 0);
}

/// A rank whose first rendezvous (through the store) times out takes its request key
/// back: the next job on the same store meets no stale request.
#[test]
fn a_rank_that_gives_up_leaves_no_key_in_the_store() {
    let _alone = alone();
    let ranks = ranks("no-leftover", 2);
    let alone = ranks.rendezvous(&[0], page_size());
    assert!(alone[0].1.as_ref().unwrap_err().is_timeout());
    assert!(
        ranks.store.is_empty(),
        "a request key outlived the failed rendezvous"
    );
}

/// A peer (or anyone who can pass as it) queues at most a bounded number of messages
/// ahead, and whatever was queued for a call that failed is closed.
#[test]
fn what_a_peer_queues_ahead_is_bounded_and_closed_when_the_call_fails() {
    let _alone = alone();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let mut config = Config::from_env().unwrap();
    config.timeout = TIMEOUT;
    let g0 = common::group(
        GroupSpec::new("ahead", 0, 2),
        store.clone(),
        &provider,
        &config,
    );
    let alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let fds_before = common::open_fds();
    std::thread::scope(|s| {
        let fake = s.spawn(|| {
            let mut endpoint = Endpoint::bind(&config.socket_dir, 98).unwrap();
            let (theirs, ours) = common::fake_rank1_requests(&*store, "ahead", &endpoint).unwrap();
            store
                .set(&Namespace::new("ahead").request(0, 1), &ours.encode())
                .unwrap();
            let memory = provider.create(4096).unwrap();
            let handle = memory.export().unwrap();
            let symmwin::adapter::SharedHandle::Fd(fd) = &handle else {
                panic!("host memory travels as an fd");
            };
            let mut buf = [0u8; FABRIC_LEN];
            for seq in 1..=20u64 {
                for _ in 0..3 {
                    let m = common::fd_message("ahead", seq, 1, 2, &theirs.token);
                    common::send_raw(&theirs.socket, m.encode(&mut buf), &[fd.as_fd()]);
                }
            }
            common::fake_rank1_all_gather(
                &mut endpoint,
                ("ahead", 4096),
                (&theirs, &ours),
                &handle,
                Duration::from_secs(2),
            )
            .unwrap();
            drop(endpoint);
        });
        let window = g0.rendezvous_with_pads(&alloc, 0).unwrap();
        fake.join().unwrap();
        drop(window);
    });
    let kept = common::open_fds().saturating_sub(fds_before);
    assert!(
        kept <= 4,
        "{kept} descriptors kept for later calls (at most 2 calls x 2)"
    );
    // The next call times out (the fake is gone): what was queued for it closes.
    let next = Allocation::new(provider.clone(), 4096).unwrap();
    assert!(g0.rendezvous_with_pads(&next, 0).is_err());
    drop(next);
    symmwin::adapter::testing::window_cache::flush();
    let left = common::open_fds().saturating_sub(fds_before);
    assert_eq!(left, 0, "descriptors queued for a failed call stay open");
}

use std::os::fd::AsFd;

/// `symmwin::request_interrupt` ends a rendezvous waiting for an absent peer within
/// 100 ms, as `Interrupted`; the group is then out of step, and `clear` lets later
/// waits run.
#[test]
fn an_interrupt_ends_a_wait_within_100_ms_and_leaves_the_group_out_of_step() {
    let _alone = alone();
    let mut config = Config::from_env().unwrap();
    config.timeout = Duration::from_secs(20);
    let store = Arc::new(MemoryStore::new());
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let lonely = Group::new(
        GroupSpec::new("lonely", 0, 2),
        store,
        provider.clone(),
        &config,
    )
    .unwrap();
    let alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let requested = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        symmwin::request_interrupt();
        Instant::now()
    });
    let err = lonely.rendezvous(&alloc).unwrap_err();
    let ended = Instant::now();
    let at = requested.join().unwrap();
    symmwin::clear_interrupt();
    assert!(matches!(err.kind(), ErrorKind::Interrupted), "{err}");
    assert!(
        ended - at < Duration::from_millis(100),
        "{:?} after the request",
        ended - at
    );
    let next = Allocation::new(provider, 4096).unwrap();
    let err = lonely.rendezvous(&next).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::OutOfStep { .. }), "{err}");
}
