//! Soak: many alloc / rendezvous / free cycles per rank at world 8 on the host
//! provider, with sizes from 1 byte to 64 MiB, several windows live at once, a
//! random free order per rank, a subgroup, and the `Registry` path torch uses.
//! Afterwards every rank's open fds, mappings, sockets and store keys must be back
//! where they were after the warm-up (which creates the pad pools).
//!
//! CI runs [`CI_CYCLES`] cycles. The full run:
//! `SYMMWIN_SOAK_CYCLES=10000 cargo test -p symmwin --test soak -- --nocapture`
//! (about 45 s on 2 cores; figures in docs/RELIABILITY.md).

mod common;

use std::time::{Duration, Instant};

use common::{entries, field, join_group, mappings, open_fds, result, Job, Rng};
use symmwin::SignalOptions;
use symmwin::{adapter::Registry, Allocation, FileStore, Window};

/// Cycles of the CI-sized run (about 10 s on 2 cores in a debug build).
const CI_CYCLES: usize = 2000;
const WORLD: usize = 8;
/// Largest window: 64 MiB (host memfds are sparse; only touched pages cost memory).
const MAX_LOG2: usize = 26;
/// Windows a rank keeps live between cycles, at most (the pad pool has 64 slots;
/// 8 ranks x 5 windows can never exhaust it, so it never grows).
const MAX_KEPT: usize = 4;
/// Every wait in the workers is bounded by this.
const TIMEOUT_MS: u64 = 3000;

fn cycles() -> usize {
    std::env::var("SYMMWIN_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CYCLES)
}

common::worker! {
    "soak" => soak,
}

/// The size of cycle `cycle`'s window: the same on every rank, log-uniform in
/// 1 B ..= 64 MiB, with both ends hit first.
fn size_of(cycle: usize) -> usize {
    match cycle {
        0 => 1,
        1 => 1 << MAX_LOG2,
        _ => {
            let mut rng = Rng::new(cycle as u64 ^ 0x5eed);
            let bits = rng.below(MAX_LOG2 + 1);
            1 + rng.below(1 << bits)
        }
    }
}

/// The byte rank `src` writes into every slot in cycle `cycle` (never 0).
fn tag(cycle: usize, src: usize) -> u8 {
    ((cycle * 131 + src * 29) % 251 + 1) as u8
}

/// One live window and what keeps it: a plain allocation, or a registry entry.
struct Live {
    window: Window,
    alloc: Option<Allocation>,
    registered: Option<usize>,
}

/// Write our tag at both ends of every rank's slot, barrier, then check that every
/// rank's tag arrived in ours. Returns the number of wrong bytes.
fn exchange_tags(window: &Window, cycle: usize) -> usize {
    let (rank, world) = (window.rank(), window.world());
    let stride = window.layout().stride;
    for peer in 0..world {
        window.write(peer, rank, &[tag(cycle, rank)]).unwrap();
        window
            .write(peer, stride - 1 - rank, &[tag(cycle, rank)])
            .unwrap();
    }
    window.barrier(SignalOptions::channel(cycle % 4)).unwrap();
    let mut head = vec![0u8; world];
    let mut tail = vec![0u8; world];
    window.read(rank, 0, &mut head).unwrap();
    window.read(rank, stride - world, &mut tail).unwrap();
    (0..world)
        .filter(|&src| head[src] != tag(cycle, src) || tail[world - 1 - src] != tag(cycle, src))
        .count()
}

/// A fresh allocation must read as zeros at both ends.
fn nonzero_ends(ptr: usize, len: usize) -> usize {
    // SAFETY: `ptr..ptr+len` is the allocation's own mapping, alive for this call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    usize::from(bytes[0] != 0) + usize::from(bytes[len - 1] != 0)
}

fn soak(rank: usize, world: usize) -> String {
    let cycles = cycles();
    let (group, provider) = join_group("soak", rank, world);
    // Even ranks also form a subgroup, whose keys and pads must never mix with ours.
    let sub = (rank % 2 == 0).then(|| join_group("soak-even", rank / 2, world.div_ceil(2)).0);
    let registry = Registry::new();
    let store = FileStore::new(std::env::var("STORE").unwrap()).unwrap();
    let sockets = std::path::PathBuf::from(std::env::var("SYMMWIN_SOCKET_DIR").unwrap());
    let mut rng = Rng::new(0xf4ee ^ rank as u64);

    // Warm-up: the first window of each group creates its pad pool. The main one
    // stays live to the end as the anchor for the closing barriers.
    let anchor_alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let anchor = group.rendezvous(&anchor_alloc).unwrap();
    if let Some(sub) = &sub {
        let a = Allocation::new(provider.clone(), 4096).unwrap();
        let w = sub.rendezvous(&a).unwrap();
        w.barrier(SignalOptions::default()).unwrap();
    }
    anchor.barrier(SignalOptions::default()).unwrap();
    // Freed windows wait in the window cache: counted flushed, nothing may be left.
    symmwin::adapter::testing::window_cache::flush();
    // The peer watcher's thread, started by the first rendezvous, maps as it starts.
    // The worker pool grows to the most jobs that ever ran at once (a rendezvous's
    // imports, a store call, the background lane): started at that size now, it
    // starts no thread during the count.
    symmwin::adapter::testing::worker::keep_idle(world + 2).unwrap();
    common::settle_threads();
    let before = (
        open_fds(),
        mappings(),
        entries(&sockets),
        store.len().unwrap(),
    );

    // Nobody starts the next rendezvous (publishing keys) until everyone has counted.
    anchor.barrier(SignalOptions::channel(1)).unwrap();
    let start = Instant::now();
    let mut live: Vec<Live> = Vec::new();
    let (mut bad, mut dirty, mut biggest) = (0, 0, 0);
    for cycle in 0..cycles {
        let size = size_of(cycle);
        biggest = biggest.max(size);
        let entry = if cycle % 3 == 1 {
            // The torch path: registry allocation, rendezvous on an interior pointer
            // (cached on the second call), free by pointer later.
            let ptr = registry.alloc(provider.clone(), size).unwrap();
            dirty += nonzero_ends(ptr, size);
            let offset = size / 2;
            let (window, got) = registry
                .rendezvous(ptr + offset, &group, symmwin::DEFAULT_PAD_SIZE)
                .unwrap()
                .unwrap();
            assert_eq!(got, offset);
            let (again, _) = registry
                .rendezvous(ptr, &group, symmwin::DEFAULT_PAD_SIZE)
                .unwrap()
                .unwrap();
            assert_eq!(
                again.layout(),
                window.layout(),
                "a second rendezvous is cached"
            );
            Live {
                window,
                alloc: None,
                registered: Some(ptr),
            }
        } else {
            let alloc = Allocation::new(provider.clone(), size).unwrap();
            dirty += nonzero_ends(alloc.ptr(), size);
            Live {
                window: group.rendezvous(&alloc).unwrap(),
                alloc: Some(alloc),
                registered: None,
            }
        };
        bad += exchange_tags(&entry.window, cycle);
        live.push(entry);
        if let Some(sub) = sub.as_ref().filter(|_| cycle % 5 == 0) {
            let alloc = Allocation::new(provider.clone(), size_of(cycle + 7)).unwrap();
            let window = sub.rendezvous(&alloc).unwrap();
            bad += exchange_tags(&window, cycle);
            live.push(Live {
                window,
                alloc: Some(alloc),
                registered: None,
            });
        }
        // Free a random number of random windows: the order differs on every rank.
        let keep = if cycle + 1 == cycles {
            0
        } else {
            rng.below(MAX_KEPT + 1)
        };
        while live.len() > keep {
            let victim = live.swap_remove(rng.below(live.len()));
            if let Some(ptr) = victim.registered {
                registry.free(ptr).unwrap();
            }
            drop(victim.alloc);
            drop(victim.window);
        }
    }
    assert_eq!(registry.allocation_count(), 0);
    let secs = start.elapsed().as_secs_f64();
    // A window taken over from the cache leaves its request key to the next
    // rendezvous: one more per group, on fresh memory, and then nothing is cached.
    symmwin::adapter::testing::window_cache::flush();
    for g in std::iter::once(&group).chain(sub.as_ref()) {
        let last = Allocation::new(provider.clone(), 4096).unwrap();
        drop(g.rendezvous(&last).unwrap());
    }
    symmwin::adapter::testing::window_cache::flush();
    // Every rank has returned from all its rendezvous (so deleted its keys) once it
    // is through this barrier; after the second one it may drop its sockets.
    anchor.barrier(SignalOptions::channel(2)).unwrap();
    let after = (
        open_fds(),
        mappings(),
        entries(&sockets),
        store.len().unwrap(),
    );
    let pools = group.pad_pool_count() + sub.as_ref().map_or(0, |s| s.pad_pool_count());
    anchor.barrier(SignalOptions::channel(3)).unwrap();
    format!(
        "cycles={cycles} fds={}->{} maps={}->{} sockets={}->{} keys={}->{} pools={pools} \
         bad={bad} dirty={dirty} biggest={biggest} secs={secs:.2}",
        before.0, after.0, before.1, after.1, before.2, after.2, before.3, after.3
    )
}

#[test]
fn soak_world_8_alloc_rendezvous_free_leaks_nothing_and_never_hangs() {
    let cycles = cycles();
    let job = Job::new("soak");
    let start = Instant::now();
    // Generous for a loaded 2-core machine, yet finite: a hang fails the test.
    let limit = Duration::from_secs(60) + Duration::from_millis(100) * cycles as u32;
    let outs = job
        .spawn(WORLD, "soak", &[common::timeout_ms(TIMEOUT_MS)])
        .wait(limit);
    let wall = start.elapsed();
    common::assert_all_success(&outs);
    for (rank, out) in outs.iter().enumerate() {
        let r = result(out);
        eprintln!("rank {rank}: {r}");
        for counter in ["fds", "maps", "sockets"] {
            let (before, after) = field(&r, counter).split_once("->").unwrap();
            assert_eq!(before, after, "rank {rank} leaks {counter}: {r}");
        }
        assert_eq!(field(&r, "keys"), "0->0", "rank {rank}: {r}");
        // Sockets: 8 for the group, 4 for the subgroup.
        assert_eq!(field(&r, "sockets"), "12->12", "rank {rank}: {r}");
        let pools = if rank % 2 == 0 { "2" } else { "1" };
        assert_eq!(
            field(&r, "pools"),
            pools,
            "rank {rank}: pad pools grew: {r}"
        );
        assert_eq!(field(&r, "bad"), "0", "rank {rank}: wrong data: {r}");
        assert_eq!(field(&r, "dirty"), "0", "rank {rank}: not zero-filled: {r}");
        assert_eq!(field(&r, "biggest"), (1usize << MAX_LOG2).to_string());
        assert_eq!(field(&r, "cycles"), cycles.to_string());
    }
    // Every group was dropped cleanly: no socket or key is left behind.
    assert_eq!(entries(&job.sockets()), 0, "sockets left behind");
    assert!(FileStore::new(job.store()).unwrap().is_empty().unwrap());
    eprintln!(
        "soak: world {WORLD}, {cycles} cycles per rank, wall {:.1} s",
        wall.as_secs_f64()
    );
}
