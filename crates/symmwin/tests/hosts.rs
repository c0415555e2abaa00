//! Groups that span hosts, on the host provider: ranks run as threads of one process,
//! split into "hosts" by `Config::host_id` (what `SYMMWIN_HOST_ID` sets). Peers of
//! another host are never mapped and are reached through a [`RemotePeers`] backend;
//! here an in-process mailbox stands in for the process group.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::hosts::{spanning, spanning_in, Mailbox, MailboxPeers};
use symmwin::{Allocation, ErrorKind, Group, MemoryStore, SignalOptions, Store};

#[test]
fn peers_of_other_hosts_are_not_mapped_and_cost_nothing() {
    let hosts = ["a", "a", "b", "b"];
    let mailbox = Arc::new(Mailbox::default());
    let results = spanning("pattern", &hosts, Some(&mailbox), |rank, group| {
        let (_alloc, window) = tagged_window(rank, &group);
        let layout = window.layout();
        let partner = rank ^ 1;
        let mut seen = [0u8; 1];
        window.read(partner, 0, &mut seen).unwrap();
        let far = (rank + 2) % 4;
        let err = window.ptr(far).unwrap_err();
        assert_eq!(err.peer(), Some(far), "{err}");
        assert!(window.read(far, 0, &mut [0u8; 1]).is_err());
        (
            window.mapped_ranks(),
            window.all_mapped(),
            window.slots(),
            window.pad_ptrs(),
            layout,
            seen[0],
            group.exchange_counts(),
        )
    });
    for (rank, (mapped, all, ptrs, pads, layout, seen, counts)) in results.into_iter().enumerate() {
        let local = if rank < 2 { vec![0, 1] } else { vec![2, 3] };
        assert_eq!(mapped, local, "rank {rank}");
        assert!(!all);
        for r in 0..4 {
            let want = if local.contains(&r) {
                layout.base + r * layout.stride
            } else {
                0
            };
            assert_eq!(ptrs[r], want, "rank {rank} ptr {r}");
            assert_eq!(pads[r] == 0, !local.contains(&r), "rank {rank} pad {r}");
        }
        assert_eq!(seen, (rank ^ 1) as u8 + 1);
        // One handle to the one local peer per rendezvous (the window and the pad pool).
        assert_eq!(counts.sent, 2, "rank {rank}: {counts:?}");
        assert_eq!(counts.accepted, 2, "rank {rank}: {counts:?}");
    }
}

fn alloc_fill(alloc: &Allocation, value: u8) {
    // SAFETY: the allocation maps `size()` writable bytes at `ptr()` in this process.
    unsafe { std::ptr::write_bytes(alloc.ptr() as *mut u8, value, alloc.size()) };
}

/// A window over 4096 bytes of `rank + 1`, so a byte read anywhere says whose it is.
fn tagged_window(rank: usize, group: &Group) -> (Allocation, symmwin::Window) {
    let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
    alloc_fill(&alloc, rank as u8 + 1);
    let window = group.rendezvous(&alloc).unwrap();
    (alloc, window)
}

#[test]
fn one_host_per_rank_maps_only_itself() {
    let mailbox = Arc::new(Mailbox::default());
    let results = spanning(
        "alone",
        &["w", "x", "y", "z"],
        Some(&mailbox),
        |_, group| {
            let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
            let window = group.rendezvous(&alloc).unwrap();
            (window.mapped_ranks(), group.exchange_counts().sent)
        },
    );
    for (rank, (mapped, sent)) in results.into_iter().enumerate() {
        assert_eq!(mapped, vec![rank]);
        assert_eq!(sent, 0, "no handle leaves a rank that has no local peer");
    }
}

#[test]
fn signals_across_hosts_go_through_the_remote_backend() {
    let mailbox = Arc::new(Mailbox::default());
    let hosts = ["a", "a", "b", "b", "c", "c", "d", "d"];
    let results = spanning("signals", &hosts, Some(&mailbox), |rank, group| {
        let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        let world = window.world();
        // Each rank writes into its local partner's memory; the barrier orders it.
        window.write(rank ^ 1, 0, &[rank as u8 + 10]).unwrap();
        for channel in 0..3 {
            window.barrier(SignalOptions::channel(channel)).unwrap();
        }
        let mut got = [0u8; 1];
        window.read(rank, 0, &mut got).unwrap();
        // A ring crossing every host: put to next, wait for previous.
        let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
        for _ in 0..5 {
            window.put_signal(next, SignalOptions::channel(1)).unwrap();
            window.wait_signal(prev, SignalOptions::channel(1)).unwrap();
        }
        window.barrier(SignalOptions::default()).unwrap();
        let far = (rank + 2) % world;
        // The channel must fit the pad for a remote peer as for a local one.
        assert!(window
            .put_signal(far, SignalOptions::channel(1 << 20))
            .is_err());
        window.barrier(SignalOptions::channel(1)).unwrap();
        // Nobody signals channel 2: a remote wait times out naming the peer, and the
        // window is poisoned from then on (a late flag must not pair with a later call).
        let late = window
            .wait_signal(
                far,
                SignalOptions::channel(2).timeout(Duration::from_millis(100)),
            )
            .unwrap_err();
        assert!(late.is_timeout(), "{late}");
        assert_eq!(late.peer(), Some(far));
        let refused = window.barrier(SignalOptions::channel(1)).unwrap_err();
        assert!(refused.to_string().contains("poisoned"), "{refused}");
        got[0]
    });
    for (rank, got) in results.into_iter().enumerate() {
        assert_eq!(got, (rank ^ 1) as u8 + 10);
    }
    let left = mailbox.in_flight();
    assert_eq!(left, 0, "every flag sent was received");
}

#[test]
fn a_group_spanning_hosts_without_a_backend_is_refused_alike_at_the_rendezvous() {
    let mailbox = Arc::new(Mailbox::default());
    let results = spanning("nobackend", &["a", "a", "b"], None, |rank, group| {
        let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
        let err = group.rendezvous(&alloc).unwrap_err();
        // Refused alike, so the group is still in step: with a backend on every rank
        // the next rendezvous works.
        group.set_remote_peers(Arc::new(MailboxPeers::new(rank, mailbox.clone())));
        let alloc = Allocation::new(group.provider().clone(), 4096).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        window.barrier(SignalOptions::default()).unwrap();
        err
    });
    for (rank, err) in results.into_iter().enumerate() {
        assert!(matches!(err.kind(), ErrorKind::Unsupported(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("symmwin rank {rank} [gather]")),
            "{text}"
        );
        assert!(
            text.contains(
                "group \"nobackend\" spans hosts and rank(s) [0, 1, 2] have no process-group \
                 backend to reach the ranks they cannot map (rank 0 cannot map [2]; rank 1 \
                 cannot map [2]; rank 2 cannot map [0, 1]"
            ),
            "{text}"
        );
        assert!(text.contains("Group::set_remote_peers"), "{text}");
    }
}

#[test]
fn windows_of_spanning_groups_tear_down_in_any_order() {
    let hosts = ["a", "a", "b", "b"];
    let mailbox = Arc::new(Mailbox::default());
    let left = spanning("teardown", &hosts, Some(&mailbox), |rank, group| {
        let mut windows = Vec::new();
        for i in 0..8 {
            let alloc = Allocation::new(group.provider().clone(), 4096 * (1 + i % 3)).unwrap();
            windows.push(group.rendezvous(&alloc).unwrap());
        }
        if rank % 2 == 1 {
            windows.reverse();
        }
        drop(windows);
        group.pad_pool_count()
    });
    assert!(left.iter().all(|&pools| pools == 1), "{left:?}");
}

#[test]
fn windows_of_spanning_groups_skip_the_cache_and_keep_their_keys_one_rendezvous() {
    let hosts = ["a", "a", "b"];
    let store = Arc::new(MemoryStore::new());
    let size = 3 * 4096;
    let key = |seq: u64, rank: usize| {
        symmwin::adapter::testing::Namespace::new("nocache").request(seq, rank)
    };
    let mailbox = Arc::new(Mailbox::default());
    let results = spanning_in(
        store.clone(),
        "nocache",
        &hosts,
        Some(&mailbox),
        |_, group| {
            let mut reused = Vec::new();
            for _ in 0..3 {
                let alloc = Allocation::new(group.provider().clone(), size).unwrap();
                reused.push(alloc.is_reused());
                drop(group.rendezvous(&alloc).unwrap());
            }
            reused
        },
    );
    // Windows with unmapped slots are freed at once, never parked, never taken back.
    assert!(results.iter().flatten().all(|&r| !r), "{results:?}");
    assert_eq!(symmwin::adapter::testing::window_cache::counts(), (0, 0));
    // Peers on other hosts send no handle, so a request key outlives its rendezvous
    // and goes once every rank has published the next one. Seq 0 made the pad pool.
    for rank in 0..hosts.len() {
        for seq in 0..3 {
            assert!(
                store.try_get(&key(seq, rank)).unwrap().is_none(),
                "seq {seq} rank {rank}"
            );
        }
        assert!(
            store.try_get(&key(3, rank)).unwrap().is_some(),
            "last key of rank {rank}"
        );
    }
}
