//! Hostile use: what a careless or malicious user of the job can do to a rendezvous
//! (two threads racing on one pointer, a token holder that is not a rank, a store
//! that stops answering, a rank passing memory that is not symmwin's, limits of the
//! operating system, absurd world sizes). Each must end in the right window or in an
//! error that names the real cause, on time.
//!
//! Run: `cargo test -p symmwin --test hostile -- --nocapture`.

mod common;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::hooked_store::{Hooked, StoreHooks};
use common::{assert_all_success, field, result, Job};
use symmwin::adapter::testing::Request;
use symmwin::adapter::testing::FABRIC_LEN;
use symmwin::adapter::SharedHandle;
use symmwin::{
    adapter::Registry, Allocation, Config, FileStore, Group, GroupSpec, HostProvider, MemoryStore,
    Provider, Store,
};

common::worker! {
    "planted" => planted,
    "intruder" => |_, _| intruder(),
    "fd_limit" => fd_limit,
    "map_limit" => |_, _| map_limit(),
}

/// A config with `timeout` and a fresh private socket directory under `dir`.
fn config(dir: &std::path::Path, timeout: Duration) -> Config {
    let mut config = Config::from_env().unwrap();
    config.timeout = timeout;
    config.socket_dir = dir.join("sock");
    config
}

/// `world` in-process ranks of group `name` on one memory store.
fn in_process_groups(
    name: &str,
    world: usize,
    store: Arc<dyn Store>,
    config: &Config,
) -> (Vec<Group>, Arc<dyn Provider>) {
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let groups = (0..world)
        .map(|r| {
            Group::new(
                GroupSpec::new(name, r, world),
                store.clone(),
                provider.clone(),
                config,
            )
            .unwrap()
        })
        .collect();
    (groups, provider)
}

fn write_u64(ptr: usize, value: u64) {
    // SAFETY: (test) `ptr` is the start of a live allocation of at least 8 bytes.
    unsafe { (ptr as *mut u64).write_volatile(value) }
}

fn read_u64(ptr: usize) -> u64 {
    // SAFETY: (test) `ptr` is inside a mapped window slot of at least 8 bytes.
    unsafe { (ptr as *const u64).read_volatile() }
}

/// Two in-process ranks of group `name` on one memory store (3 s timeout), each with
/// a registry of its own, as two processes would have; the job keeps their sockets.
fn two_ranks_with_registries(
    name: &str,
) -> (Job, Vec<Group>, Arc<dyn Provider>, [Arc<Registry>; 2]) {
    let job = Job::new(name);
    let config = config(&job.dir, Duration::from_secs(3));
    let (groups, provider) = in_process_groups(name, 2, Arc::new(MemoryStore::new()), &config);
    let registries = [Arc::new(Registry::new()), Arc::new(Registry::new())];
    (job, groups, provider, registries)
}

// ------------------------------------------------- 1. two threads, one pointer

#[test]
fn two_threads_rendezvousing_one_pointer_share_one_collective() {
    let (_job, groups, provider, registries) = two_ranks_with_registries("race");
    let ptr_a = registries[0].alloc(provider.clone(), 4096).unwrap();
    let ptr_d = registries[0].alloc(provider.clone(), 4096).unwrap();
    let ptr_b = registries[1].alloc(provider.clone(), 4096).unwrap();
    let ptr_c = registries[1].alloc(provider.clone(), 4096).unwrap();
    write_u64(ptr_b, 0xB);
    write_u64(ptr_c, 0xC);
    let start = Arc::new(Barrier::new(3));
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let (registry, group, start) =
                (registries[0].clone(), groups[0].clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let (window, _) = registry.rendezvous(ptr_a, &group, 0).unwrap().unwrap();
                (window.layout().base, read_u64(window.ptr(1).unwrap()))
            })
        })
        .collect();
    let (registry1, group1) = (registries[1].clone(), groups[1].clone());
    let peer = std::thread::spawn(move || {
        start.wait();
        let (b, _) = registry1.rendezvous(ptr_b, &group1, 0).unwrap().unwrap();
        let (c, _) = registry1.rendezvous(ptr_c, &group1, 0).unwrap().unwrap();
        (b, c)
    });
    let seen: Vec<(usize, u64)> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(seen[0].0, seen[1].0, "both threads get the one window");
    assert_eq!(
        seen[0].1, 0xB,
        "rank 1's slot holds the allocation it rendezvoused"
    );
    // The group is still in step: rank 0's next window pairs with rank 1's next.
    let (d, _) = registries[0]
        .rendezvous(ptr_d, &groups[0], 0)
        .unwrap()
        .unwrap();
    assert_eq!(read_u64(d.ptr(1).unwrap()), 0xC);
    drop(peer.join().unwrap());
}

// ------------------------------------------------- 2. a token holder plants memory

fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Rank 1 starts only after the intruder has read rank 0's token from the store and
/// sent rank 0 a sealed memfd claiming to be rank 1 for the *second* rendezvous.
fn planted(rank: usize, world: usize) -> String {
    let (group, provider) = common::join_group("planted", rank, world);
    let sent = PathBuf::from(std::env::var("STORE").unwrap()).with_file_name("intruder-sent");
    if rank == 1 {
        wait_for(&sent);
    }
    let first = Allocation::new(provider.clone(), 4096).unwrap();
    let _w1 = group.rendezvous_with_pads(&first, 0).unwrap();
    let second = Allocation::new(provider, 4096).unwrap();
    write_u64(second.ptr(), 0x100 + rank as u64);
    let w2 = group.rendezvous_with_pads(&second, 0).unwrap();
    let peer = read_u64(w2.ptr(1 - rank).unwrap());
    format!("peer={peer:#x} rejected={}", group.rejected_messages())
}

fn intruder() -> String {
    let store = FileStore::new(std::env::var("STORE").unwrap()).unwrap();
    let key = "symmwin/planted/0/req/0";
    let deadline = Instant::now() + Duration::from_secs(20);
    let theirs = loop {
        if let Some(v) = store.try_get(key).unwrap() {
            break Request::decode(key, 0, &v).unwrap();
        }
        assert!(Instant::now() < deadline, "rank 0 never published");
        std::thread::sleep(Duration::from_millis(1));
    };
    // Zero-filled: mapped as rank 1's memory, it would read 0 instead of rank 1's tag.
    let evil = HostProvider::new().create(4096).unwrap();
    let SharedHandle::Fd(fd) = evil.export().unwrap() else {
        unreachable!("host memory is shared as fds")
    };
    let message = common::fd_message("planted", 1, 1, 2, &theirs.token);
    let mut buf = [0u8; FABRIC_LEN];
    common::send_raw(&theirs.socket, message.encode(&mut buf), &[fd.as_fd()]);
    std::fs::write(
        PathBuf::from(std::env::var("STORE").unwrap()).with_file_name("intruder-sent"),
        b"",
    )
    .unwrap();
    "sent=1".into()
}

#[test]
fn a_token_holder_that_is_not_a_rank_cannot_plant_memory() {
    let job = Job::new("planted");
    let ranks = job.spawn(2, "planted", &[]);
    let intruder = job.spawn(1, "intruder", &[]);
    let outs = ranks.wait(common::DEFAULT_LIMIT);
    let intruded = intruder.wait(common::DEFAULT_LIMIT);
    assert_all_success(&intruded);
    assert_all_success(&outs);
    let r0 = result(&outs[0]);
    assert_eq!(
        field(&r0, "peer"),
        "0x101",
        "rank 1's real memory, not the planted one: {r0}"
    );
    assert_eq!(field(&r0, "rejected"), "1", "{r0}");
    assert_eq!(field(&result(&outs[1]), "peer"), "0x100");
}

// ------------------------------------------------- 3. a store that stops answering

/// Store hooks that answer reads of rank 1's request only after `delay`.
struct Stuck {
    delay: Duration,
}

impl StoreHooks for Stuck {
    fn before_get(&self, key: &str) {
        if key.ends_with("/req/1") {
            std::thread::sleep(self.delay);
        }
    }

    fn describe(&self) -> Option<String> {
        Some("hosted by rank 1 at 10.0.0.1:29500".into())
    }
}

#[test]
fn the_timeout_holds_while_a_store_call_blocks() {
    let job = Job::new("stuck");
    let timeout = Duration::from_millis(1000);
    let store = Arc::new(Hooked {
        inner: MemoryStore::new(),
        hooks: Stuck {
            delay: Duration::from_secs(5),
        },
    });
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let group = common::group(
        GroupSpec::new("stuck", 0, 2),
        store,
        &provider,
        &config(&job.dir, timeout),
    );
    let alloc = Allocation::new(provider, 4096).unwrap();
    let start = Instant::now();
    let err = group.rendezvous(&alloc).unwrap_err().to_string();
    let waited = start.elapsed();
    eprintln!("returned after {waited:?}: {err}");
    assert!(waited < timeout + Duration::from_millis(200), "{waited:?}");
    assert!(
        err.contains("store is unreachable (hosted by rank 1 at 10.0.0.1:29500)"),
        "{err}"
    );
}

// ------------------------------------------------- 7. foreign memory on one rank

#[test]
fn a_rank_that_passed_foreign_memory_is_named_on_every_rank() {
    let (_job, groups, provider, registries) = two_ranks_with_registries("foreign");
    let ptrs: Vec<usize> = (0..2)
        .map(|r| registries[r].alloc(provider.clone(), 4096).unwrap())
        .collect();
    // Rank 1 passes memory that is not symmwin's: None, no store round trip.
    let foreign = [0u8; 64];
    assert!(registries[1]
        .rendezvous(foreign.as_ptr() as usize, &groups[1], 0)
        .unwrap()
        .is_none());
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (registry, group, ptr) = (&registries[r], &groups[r], ptrs[r]);
                s.spawn(move || registry.rendezvous(ptr, group, 0).unwrap_err().to_string())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for err in &errors {
        assert!(
            err.contains("ranks disagree on foreign_calls: 0 on rank(s) [0]; 1 on rank(s) [1]"),
            "{err}"
        );
    }
    // Every rank passing foreign memory stays free and in step.
    for r in 0..2 {
        assert!(registries[r]
            .rendezvous(foreign.as_ptr() as usize, &groups[r], 0)
            .unwrap()
            .is_none());
    }
}

// ------------------------------------------------- 9. limits of the operating system

/// Store hooks for rank 0: take away every free fd once it has read every peer's
/// request, so that no peer's fd can be installed when it arrives.
struct ExhaustAfterGather {
    world: usize,
    seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl StoreHooks for ExhaustAfterGather {
    fn after_get(&self, key: &str, value: Option<&[u8]>) {
        let mut seen = self.seen.lock().unwrap();
        // Our own request is never read back: the peers' are all there is to read.
        if value.is_some() && seen.insert(key.to_owned()) && seen.len() == self.world - 1 {
            // `read_dir` counts its own fd too: the limit leaves none free.
            let open = common::open_fds() as u64 - 1;
            let limit = rustix::process::Rlimit {
                current: Some(open),
                maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).unwrap();
        }
    }
}

fn fd_limit(rank: usize, world: usize) -> String {
    let (group, provider) = common::join_wrapped("fdlimit", rank, world, |inner| {
        if rank == 0 {
            Arc::new(Hooked {
                inner,
                hooks: ExhaustAfterGather {
                    world,
                    seen: Default::default(),
                },
            })
        } else {
            Arc::new(inner)
        }
    });
    let alloc = Allocation::new(provider, 4096).unwrap();
    match group.rendezvous_with_pads(&alloc, 0) {
        Ok(_) => "ok=1".into(),
        Err(e) => format!("error={:?}", e.to_string()),
    }
}

#[test]
fn receiving_past_the_open_file_limit_names_the_limit() {
    let job = Job::new("fdlimit");
    let outs = job.run(4, "fd_limit", &[common::timeout_ms(1000)]);
    eprintln!("{}", result(&outs[0]));
    assert_all_success(&outs);
    let r0 = result(&outs[0]);
    assert!(r0.contains("open-file limit (RLIMIT_NOFILE"), "{r0}");
    assert!(r0.contains("ulimit -n"), "{r0}");
}

/// Two in-process ranks make a window, fill the address space with small mappings up
/// to `vm.max_map_count` but for a few, and rendezvous again.
fn map_limit() -> String {
    let job_dir = PathBuf::from(std::env::var("STORE").unwrap());
    let config = config(job_dir.parent().unwrap(), Duration::from_secs(3));
    let (groups, provider) = in_process_groups("maps", 2, Arc::new(MemoryStore::new()), &config);
    // One long-lived thread per rank: a thread spawned later would need mappings too.
    let ranks: Vec<_> = groups
        .iter()
        .map(|group| {
            let group = group.clone();
            let (ask, asked) = std::sync::mpsc::channel::<Allocation>();
            let (answer, answers) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for alloc in asked {
                    let result = group
                        .rendezvous_with_pads(&alloc, 0)
                        .map(|w| w.layout().base);
                    answer.send(result.map_err(|e| e.to_string())).unwrap();
                }
            });
            (ask, answers)
        })
        .collect();
    let rendezvous_all = |allocs: &[Allocation]| -> Vec<Result<usize, String>> {
        for (r, alloc) in allocs.iter().enumerate() {
            ranks[r].0.send(alloc.clone()).unwrap();
        }
        ranks
            .iter()
            .map(|(_, answers)| answers.recv().unwrap())
            .collect()
    };
    // Warm up: the store workers and every thread stack exist before the limit bites.
    let warm: Vec<_> = (0..2)
        .map(|_| Allocation::new(provider.clone(), 4096).unwrap())
        .collect();
    let warm_windows = rendezvous_all(&warm);
    assert!(warm_windows.iter().all(|w| w.is_ok()));
    let allocs: Vec<_> = (0..2)
        .map(|_| Allocation::new(provider.clone(), 4096).unwrap())
        .collect();
    let page = 4096;
    let mut filler = Vec::new();
    // Alternate protections so that neighbouring mappings cannot merge.
    loop {
        let prot = if filler.len() % 2 == 0 {
            rustix::mm::ProtFlags::READ
        } else {
            rustix::mm::ProtFlags::empty()
        };
        // SAFETY: (test) a fresh anonymous mapping at an address the kernel picks.
        match unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                page,
                prot,
                rustix::mm::MapFlags::PRIVATE,
            )
        } {
            Ok(p) => filler.push(p as usize),
            Err(_) => break,
        }
    }
    let free: usize = std::env::var("FREE_MAPPINGS").unwrap().parse().unwrap();
    for p in filler.drain(filler.len() - free..) {
        // SAFETY: (test) unmapping a page this test mapped.
        unsafe { rustix::mm::munmap(p as *mut _, page).unwrap() };
    }
    let errors: Vec<String> = rendezvous_all(&allocs)
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    format!("mappings={} errors={:?}", filler.len(), errors)
}

#[test]
fn mapping_past_vm_max_map_count_names_the_limit() {
    let job = Job::new("maplimit");
    let outs = job.run(
        1,
        "map_limit",
        &[
            common::timeout_ms(1500),
            common::one_malloc_arena(),
            ("FREE_MAPPINGS", "3".into()),
        ],
    );
    assert_all_success(&outs);
    let r = result(&outs[0]);
    assert!(r.contains("vm.max_map_count is"), "{r}");
    assert!(r.contains("sysctl -w vm.max_map_count="), "{r}");
}

// ------------------------------------------------- 10. absurd world sizes

#[test]
fn absurd_world_sizes_are_refused_where_they_enter() {
    let job = Job::new("world");
    let config = config(&job.dir, Duration::from_secs(1));
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    for world in [1_000_000_000usize, (1 << 32) + 2] {
        let start = Instant::now();
        let err = Group::new(
            GroupSpec::new("huge", 0, world),
            Arc::new(MemoryStore::new()),
            provider.clone(),
            &config,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(&format!(
                "world size {world} is larger than symmwin supports"
            )),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_millis(100));
    }
    let mut spec = GroupSpec::new("negative", 0, 2);
    spec.global_ranks = vec![0, -3];
    let err = Group::new(spec, Arc::new(MemoryStore::new()), provider, &config)
        .unwrap_err()
        .to_string();
    assert!(err.contains("global rank -3 is negative"), "{err}");
}
