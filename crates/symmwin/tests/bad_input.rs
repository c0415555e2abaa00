//! Bad input: a table of wrong calls, malformed store values, forged or broken
//! handles and bad configuration. Every case must fail with a clear message (checked
//! by text), leak nothing (open fds and mappings unchanged), and leave another live
//! window intact (its data still readable and writable, its barrier still working).
//!
//! The table runs in one worker process, alone, so the fd and mapping counts are its
//! own. Peers are played in-process: a second rank on another thread, or a fake
//! rank 1 that publishes a crafted request and sends crafted handles.
//!
//! Run: `cargo test -p symmwin --test bad_input -- --nocapture` (prints every case).

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{mappings, open_fds, result, Job};
use symmwin::testing::Endpoint;
use symmwin::testing::Namespace;
use symmwin::testing::Request;
use symmwin::testing::FABRIC_LEN;
use symmwin::Operand;
use symmwin::Shape;
use symmwin::SharedHandle;
use symmwin::SignalOptions;
use symmwin::{
    Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider, Registry, Store,
    Window,
};
use symmwin::{ElemType, OpOptions, ReduceOp, Rows, Tile};

common::worker! {
    "table" => |_, _| table(),
}

#[test]
fn every_bad_input_fails_clearly_leaks_nothing_and_spares_live_windows() {
    let job = Job::new("bad");
    let outs = job.run(
        1,
        "table",
        &[common::timeout_ms(1500), common::one_malloc_arena()],
    );
    common::assert_all_success(&outs);
    eprintln!("{}", String::from_utf8_lossy(&outs[0].stderr));
    let r = result(&outs[0]);
    assert!(r.ends_with("failed=[]"), "{r}");
    let cases: usize = common::field(&r, "cases").parse().unwrap();
    assert!(cases >= 20, "{r}");
}

// ------------------------------------------------------------------ context

/// What every case can use.
struct Ctx {
    provider: Arc<dyn Provider>,
    config: Config,
    /// A scratch directory of the job (for socket directories and stores).
    scratch: PathBuf,
    /// The live pair of windows that must survive every case (rank 0 and rank 1).
    pair: Pair,
}

impl Ctx {
    /// Join `spec` alone, on a fresh memory store, with this context's provider and
    /// `config` (the case's own or the context's).
    fn join_alone(&self, spec: GroupSpec, config: &Config) -> symmwin::Result<Group> {
        Group::new(
            spec,
            Arc::new(MemoryStore::new()),
            self.provider.clone(),
            config,
        )
    }
}

struct Pair {
    allocs: [Allocation; 2],
    windows: [Window; 2],
}

fn group(ctx: &Ctx, store: Arc<dyn Store>, name: &str, rank: usize, world: usize) -> Group {
    Group::new(
        GroupSpec::new(name, rank, world),
        store,
        ctx.provider.clone(),
        &ctx.config,
    )
    .unwrap()
}

fn make_pair(provider: &Arc<dyn Provider>, config: &Config) -> Pair {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let groups = [0, 1].map(|rank| {
        Group::new(
            GroupSpec::new("intact", rank, 2),
            store.clone(),
            provider.clone(),
            config,
        )
        .unwrap()
    });
    let allocs = [0, 1].map(|_| Allocation::new(provider.clone(), 4096).unwrap());
    let windows = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (g, a) = (&groups[r], &allocs[r]);
                s.spawn(move || g.rendezvous(a).unwrap())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let windows: [Window; 2] = windows.try_into().unwrap();
    // The windows keep their groups (and sockets) alive.
    Pair { allocs, windows }
}

impl Pair {
    /// Both ranks write `round` into each other's slot, barrier, and read it back;
    /// afterwards both pads are zero again.
    fn check(&self, round: u8) -> Result<(), String> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let w = &self.windows[rank];
                    s.spawn(move || -> Result<(), String> {
                        let e = |e: symmwin::Error| e.to_string();
                        w.write(1 - rank, 64 + rank, &[round]).map_err(e)?;
                        w.barrier(SignalOptions::default()).map_err(e)?;
                        let mut got = [0u8];
                        w.read(rank, 64 + (1 - rank), &mut got).map_err(e)?;
                        w.barrier(SignalOptions::channel(1)).map_err(e)?;
                        if got[0] != round {
                            return Err(format!("rank {rank} read {} not {round}", got[0]));
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().map_err(|_| "panicked".to_owned())?)
        })?;
        // The allocation's own view sees what the peer wrote through the window.
        // SAFETY: the allocation is live and at least 65 bytes long.
        let own = unsafe { *((self.allocs[0].ptr() + 65) as *const u8) };
        if own != round {
            return Err(format!("allocation view reads {own}, not {round}"));
        }
        for w in &self.windows {
            let pad = w.pad_ptrs()[w.rank()];
            // SAFETY: our own pad is mapped for the window's lifetime.
            let words = unsafe { std::slice::from_raw_parts(pad as *const u32, w.pad_size() / 4) };
            if words.iter().any(|&x| x != 0) {
                return Err(format!("rank {} pad is not zero at rest", w.rank()));
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the table

type Case = (&'static str, fn(&Ctx) -> String, &'static [&'static str]);

fn table() -> String {
    let scratch = PathBuf::from(std::env::var("STORE").unwrap()).with_file_name("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let config = Config::from_env().unwrap();
    let pair = make_pair(&provider, &config);
    let ctx = Ctx {
        provider,
        config,
        scratch,
        pair,
    };
    // Warm-up: the first threads, rendezvous and sockets create allocator arenas and
    // stack caches that later cases reuse. Count leaks only after that.
    ctx.pair.check(1).unwrap();
    garbage_then_valid(&ctx);
    ctx.pair.check(2).unwrap();

    // The leak check has teeth: a forgotten allocation shows in both counts.
    let (fds, maps) = (open_fds(), mappings());
    std::mem::forget(Allocation::new(ctx.provider.clone(), 4096).unwrap());
    assert!(
        open_fds() > fds && mappings() > maps,
        "leak detector is blind"
    );

    let mut failed = Vec::new();
    for (i, (name, case, expect)) in CASES.iter().enumerate() {
        // Freed windows wait in the window cache; flushed, nothing may be left.
        symmwin::testing::window_cache::flush();
        let (fds, maps) = (open_fds(), mappings());
        let maps_before = std::fs::read_to_string("/proc/self/maps").unwrap();
        let got = case(&ctx);
        symmwin::testing::window_cache::flush();
        let (fds1, maps1) = (open_fds(), mappings());
        if maps1 != maps {
            // Show what changed, to tell a leaked span or memfd from allocator noise.
            let maps_after = std::fs::read_to_string("/proc/self/maps").unwrap();
            for l in maps_before.lines().filter(|l| !maps_after.contains(l)) {
                eprintln!("  - {l}");
            }
            for l in maps_after.lines().filter(|l| !maps_before.contains(l)) {
                eprintln!("  + {l}");
            }
        }
        let intact = ctx.pair.check(3 + i as u8);
        let missing: Vec<&&str> = expect.iter().filter(|e| !got.contains(**e)).collect();
        let ok = missing.is_empty() && fds == fds1 && maps == maps1 && intact.is_ok();
        eprintln!(
            "{} case {i:2} {name}: {got}{}",
            if ok { "ok  " } else { "FAIL" },
            if ok {
                String::new()
            } else {
                format!(" | missing {missing:?} fds {fds}->{fds1} maps {maps}->{maps1} {intact:?}")
            }
        );
        if !ok {
            failed.push(*name);
        }
    }
    format!("cases={} failed={failed:?}", CASES.len())
}

/// The error text of a call that must fail.
fn err<T>(r: symmwin::Result<T>) -> String {
    match r {
        Ok(_) => "UNEXPECTED SUCCESS".into(),
        Err(e) => {
            let peer = e.peer().map(|p| format!(" (peer={p})")).unwrap_or_default();
            format!("{e}{peer}")
        }
    }
}

/// A world-1 group of its own, for cases that need one.
fn solo(ctx: &Ctx) -> Group {
    group(ctx, Arc::new(MemoryStore::new()), "solo", 0, 1)
}

const CASES: &[Case] = &[
    // --- allocation sizes
    (
        "zero size",
        |c| err(Allocation::new(c.provider.clone(), 0)),
        &["cannot allocate 0 bytes"],
    ),
    (
        "usize::MAX bytes",
        |c| err(Allocation::new(c.provider.clone(), usize::MAX)),
        &["overflows when rounded up"],
    ),
    (
        "more than a memfd can hold (2^63 bytes)",
        |c| err(Allocation::new(c.provider.clone(), 1 << 63)),
        &["[create]", "ftruncate failed"],
    ),
    (
        "more than the address space (2^48 bytes)",
        |c| err(Allocation::new(c.provider.clone(), 1 << 48)),
        &["[map]", "mmap(reserve) failed"],
    ),
    (
        "a span larger than the address space (2 x 2^46 bytes)",
        huge_span,
        &["[map]", "mmap(reserve) failed"],
    ),
    // --- group membership
    (
        "rank >= world",
        |c| err(c.join_alone(GroupSpec::new("g", 2, 2), &c.config)),
        &["rank 2 is not in a group of 2 ranks"],
    ),
    (
        "world 0",
        |c| err(c.join_alone(GroupSpec::new("g", 0, 0), &c.config)),
        &["rank 0 is not in a group of 0 ranks"],
    ),
    (
        "empty group name",
        |c| err(c.join_alone(GroupSpec::new("", 0, 1), &c.config)),
        &["group name is empty"],
    ),
    (
        "global_ranks of the wrong length",
        |c| {
            let mut spec = GroupSpec::new("g", 0, 2);
            spec.global_ranks = vec![0, 1, 2];
            err(c.join_alone(spec, &c.config))
        },
        &["3 global ranks given for a group of 2"],
    ),
    // --- out-of-range arguments on a live window (the one that must stay intact)
    (
        "ptr(rank = world)",
        |c| err(c.pair.windows[0].ptr(2)),
        &["rank 2 out of range for world size 2"],
    ),
    (
        "write to rank 5",
        |c| err(c.pair.windows[0].write(5, 0, &[1])),
        &["rank 5 out of range for world size 2"],
    ),
    (
        "read from rank usize::MAX",
        |c| err(c.pair.windows[0].read(usize::MAX, 0, &mut [0])),
        &["out of range for world size 2"],
    ),
    (
        "write past the end of a slot",
        |c| {
            let stride = c.pair.windows[0].layout().stride;
            err(c.pair.windows[0].write(1, stride - 1, &[7, 7]))
        },
        &["2 bytes at offset 4095 overrun a slot of 4096 bytes"],
    ),
    (
        "read at offset usize::MAX",
        |c| err(c.pair.windows[0].read(0, usize::MAX, &mut [0])),
        &["overrun a slot"],
    ),
    (
        "copy from past the end of a slot",
        |c| err(c.pair.windows[0].copy((0, 0), (1, 4096), 1)),
        &["1 bytes at offset 4096 overrun"],
    ),
    (
        "zero_own past the end",
        |c| err(c.pair.windows[0].zero_own(4000, 200)),
        &["range overruns this rank's slot"],
    ),
    (
        "put_signal to rank = world",
        |c| err(c.pair.windows[0].put_signal(2, SignalOptions::default())),
        &["[signal]", "rank 2 out of range for world size 2"],
    ),
    (
        "wait_signal from rank usize::MAX",
        |c| err(c.pair.windows[0].wait_signal(usize::MAX, SignalOptions::default())),
        &["out of range for world size 2"],
    ),
    (
        "barrier on channel 2^20",
        |c| err(c.pair.windows[0].barrier(SignalOptions::channel(1 << 20))),
        &["channel 1048576 does not fit a signal pad of 9216 bytes at world size 2"],
    ),
    (
        "put_signal on channel usize::MAX",
        |c| err(c.pair.windows[0].put_signal(1, SignalOptions::channel(usize::MAX))),
        &["does not fit a signal pad"],
    ),
    (
        "wait_signal nobody answers",
        |c| {
            err(c.pair.windows[0].wait_signal(
                1,
                SignalOptions::channel(5).timeout(Duration::from_millis(50)),
            ))
        },
        &["peer 1", "timed out after 0.05 s waiting for rank(s) [1]"],
    ),
    (
        "barrier on a window without pads",
        |c| {
            let a = Allocation::new(c.provider.clone(), 4096).unwrap();
            let w = solo(c).rendezvous_with_pads(&a, 0).unwrap();
            err(w.barrier(SignalOptions::default()))
        },
        &["this window has no signal pads"],
    ),
    (
        "pad size not a multiple of 4",
        |c| {
            let a = Allocation::new(c.provider.clone(), 4096).unwrap();
            err(solo(c).rendezvous_with_pads(&a, 10))
        },
        &["signal pad size 10 is not a multiple of 4"],
    ),
    (
        "pad size too large for a pool",
        |c| {
            let a = Allocation::new(c.provider.clone(), 4096).unwrap();
            err(solo(c).rendezvous_with_pads(&a, usize::MAX - 3))
        },
        &["is too large"],
    ),
    // --- the registry
    (
        "registry: rendezvous on a freed pointer",
        registry_freed,
        &["None"],
    ),
    (
        "registry: rendezvous on a foreign pointer",
        registry_foreign,
        &["None"],
    ),
    (
        "registry: free of a foreign pointer",
        |_| {
            let local = [0u8; 16];
            err(Registry::new().free(local.as_ptr() as usize))
        },
        &["is not a live symmwin allocation"],
    ),
    (
        "registry: double free",
        |c| {
            let reg = Registry::new();
            let p = reg.alloc(c.provider.clone(), 4096).unwrap();
            reg.free(p).unwrap();
            err(reg.free(p))
        },
        &["is not a live symmwin allocation"],
    ),
    (
        "registry: second rendezvous is cached, not collective",
        registry_cached,
        &["cached same-layout offset=100"],
    ),
    // --- what peers publish
    (
        "corrupted store value",
        |c| fake_request(c, |_, _| b"\x00garbage{".to_vec()),
        &[
            "[gather] peer 1",
            "corrupt store value for key symmwin/fake/0/req/1: not a request",
            "(peer=1)",
        ],
    ),
    (
        "request claiming another rank",
        |c| edited_request(c, |r| r.rank = 0),
        &["claims rank 0 under rank 1's key", "(peer=1)"],
    ),
    (
        "token that is not hex",
        |c| edited_request(c, |r| r.token = "zz".repeat(16)),
        &[
            "key symmwin/fake/0/req/1: token is not 32 hex digits",
            "(peer=1)",
        ],
    ),
    (
        "ranks disagree on world size, and on protocol version",
        |c| {
            let world = edited_request(c, |r| r.world = 3);
            format!("{world} | {}", edited_request(c, |r| r.version = 99))
        },
        &[
            "ranks disagree on world: 2 on rank(s) [0]; 3 on rank(s) [1]",
            "ranks disagree on version: 4 on rank(s) [0]; 99 on rank(s) [1]",
        ],
    ),
    (
        "request whose locality is not one",
        |c| {
            fake_request(c, |r, _| {
                let mut value: serde_json::Value = serde_json::from_slice(&r.encode()).unwrap();
                value["locality"] = "elsewhere".into();
                serde_json::to_vec(&value).unwrap()
            })
        },
        &["[gather] peer 1", "not a request", "Locality"],
    ),
    (
        "asymmetric sizes (two real ranks)",
        asymmetric,
        &[
            "rank 0:",
            "rank 1:",
            "ranks disagree on size: 4096 on rank(s) [0]; 8192 on rank(s) [1]",
        ],
    ),
    (
        "request naming a socket outside a private directory",
        |c| edited_request(c, |r| r.socket = open_socket(c)),
        // The socket probe refuses it before any handle is sent.
        &["[exchange] peer 1", "lies in another directory here"],
    ),
    (
        "request naming a socket that does not exist",
        |c| edited_request(c, |r| r.socket = c.scratch.join("nowhere.sock")),
        &["[exchange] peer 1", "nowhere.sock is gone"],
    ),
    (
        "peer publishes and never sends",
        |c| {
            let a = Allocation::new(c.provider.clone(), 4096).unwrap();
            let linger: AfterPublish<'_> =
                Box::new(|_, _, _| std::thread::sleep(Duration::from_millis(500)));
            fake_request_with(c, &a, 0, |r, _| r.encode(), Some(linger))
        },
        &[
            "[exchange]",
            "timed out after 0.30 s waiting for rank(s) [1]",
        ],
    ),
    // --- what peers send
    (
        "fd of the wrong size",
        |c| fake_send(c, |p| Forged::Handle(export(p.create(8192).unwrap()), 4096)),
        &[
            "[import] peer 1",
            "received region is 8192 bytes, expected 4096",
        ],
    ),
    (
        "unsealed memfd",
        |c| {
            fake_send(c, |_| {
                Forged::Handle(SharedHandle::Fd(unsealed_memfd(4096)), 4096)
            })
        },
        &["[import] peer 1", "received fd is not a sealed memfd"],
    ),
    (
        "an fd that is not a memfd",
        |c| {
            fake_send(c, |_| {
                Forged::Handle(
                    SharedHandle::Fd(std::fs::File::open("/dev/null").unwrap().into()),
                    4096,
                )
            })
        },
        &["[import] peer 1", "fcntl(F_GET_SEALS) failed"],
    ),
    (
        "fabric handle to a host window",
        |c| fake_send(c, |_| Forged::Handle(SharedHandle::Fabric([3; 64]), 4096)),
        &[
            "[import] peer 1",
            "host memory is shared as file descriptors",
        ],
    ),
    (
        "handle message claiming another size",
        |c| fake_send(c, |p| Forged::Handle(export(p.create(4096).unwrap()), 8192)),
        &[
            "[exchange] peer 1",
            "rank 1 sent size 8192 at world 2, expected size 4096 at world 2",
        ],
    ),
    (
        "garbage, forged and over-stuffed datagrams",
        garbage_then_valid,
        &["ok rejected=4 peer_byte=0x5a"],
    ),
    // --- configuration
    (
        "SYMMWIN_HANDLE_TYPE=bogus",
        |_| env_case("SYMMWIN_HANDLE_TYPE", "bogus"),
        &["SYMMWIN_HANDLE_TYPE=\"bogus\" is not a handle type; allowed: auto, fd or fabric"],
    ),
    (
        "SYMMWIN_TIMEOUT_MS=abc, -5 and 0",
        |_| {
            ["abc", "-5", "0"]
                .map(|v| env_case("SYMMWIN_TIMEOUT_MS", v))
                .join(" | ")
        },
        &[
            "SYMMWIN_TIMEOUT_MS=\"abc\" is not a number",
            "SYMMWIN_TIMEOUT_MS=\"-5\" is negative",
            "SYMMWIN_TIMEOUT_MS=\"0\" is zero",
        ],
    ),
    (
        "socket directory others can enter (0755)",
        |c| {
            socket_dir_case(c, |d| {
                std::fs::create_dir(&d).unwrap();
                set_mode(&d, 0o755);
                d
            })
        },
        &["[exchange]", "has mode 755; it must be 0700"],
    ),
    (
        "socket directory is a symlink",
        |c| {
            socket_dir_case(c, |d| {
                let real = d.with_extension("real");
                std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
                    .create(&real)
                    .unwrap();
                std::os::unix::fs::symlink(&real, &d).unwrap();
                d
            })
        },
        &["is not a directory (a symlink is refused)"],
    ),
    (
        "socket directory is a file",
        |c| {
            socket_dir_case(c, |d| {
                std::fs::write(&d, b"x").unwrap();
                d
            })
        },
        &["is not a directory"],
    ),
    (
        "socket directory owned by another user",
        |c| {
            if !rustix::process::geteuid().is_root() {
                return "skipped (needs root): is owned by uid".into();
            }
            socket_dir_case(c, |d| {
                std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
                    .create(&d)
                    .unwrap();
                std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
                d
            })
        },
        &["is owned by uid"],
    ),
    (
        "socket directory path too long",
        |c| {
            // A private directory, but socket paths in it cannot fit a sockaddr_un.
            socket_dir_case(c, |d| {
                let long = d.join("x".repeat(120));
                std::fs::create_dir_all(&long).unwrap();
                set_mode(&long, 0o700);
                long
            })
        },
        &["set SYMMWIN_SOCKET_DIR to a shorter directory"],
    ),
    (
        "store counter that is not an integer",
        |_| {
            let store = MemoryStore::new();
            store.set("n", b"seven").unwrap();
            err(store.add("n", 1))
        },
        &["corrupt store value for key n: counter is not an integer"],
    ),
    // --- op arguments, at world 2 (refused on the calling rank before any signal)
    (
        "op ranks beyond 32 bits",
        ranks_beyond_32_bits,
        &[
            "broadcast: Some(\"invalid argument: root 4294967296 is not a rank of the group (0 to 1, world size 2)\")",
            "put: Some(\"invalid argument: peer 4294967297 is not a rank",
            "get: Some(\"invalid argument: peer -1 is not a rank",
            "wait_signal: Some(\"invalid argument: peer 4294967297 is not a rank",
            "put_with_signal: Some(\"invalid argument: peer 4294967297 is not a rank",
            "put_signal: Some(\"invalid argument: peer 4294967297 is not a rank",
            "tile_reduce: Some(\"invalid argument: root 4294967296 is not a rank",
            "wait_for_signal: Some(\"invalid argument: peer 4294967298 is not a rank",
        ],
    ),
    (
        "all_to_all of 9 floats at world 2",
        |c| {
            let w = &c.pair.windows[0];
            let (input, out) = (Operand::new(w, 0, 36), Operand::new(w, 2048, 36));
            err(symmwin::all_to_all(input, out, 4, &OpOptions::default()))
        },
        &["all_to_all: 9 elements do not split evenly among the 2 ranks"],
    ),
    (
        "aliased and overlapping operands",
        |c| aliased_operands(&c.pair.windows[0]),
        &[
            "all_to_all: out (bytes 0..64 of its window) overlaps input (bytes 0..64)",
            "all_to_all: out (bytes 32..96 of its window) overlaps input (bytes 0..64)",
            "all_to_all_vdev: out (bytes 0..96 of its window) overlaps input",
            "all_to_all_vdev: out_splits_offsets (bytes 1024..1056 of its window) overlaps in_splits",
            "put_with_signal: sigpad (bytes 56..64 of its window) overlaps tensor",
            "tile_reduce: out_tile (bytes 0..64 of its window) overlaps in_tiles[0]",
        ],
    ),
    (
        "in_splits of 3 entries at world 2",
        |c| {
            let w = &c.pair.windows[0];
            let rows = Rows {
                row_bytes: 16,
                in_rows: 4,
                out_rows: 4,
            };
            err(symmwin::all_to_all_v(
                Shape::Flat,
                Operand::new(w, 0, 64),
                Operand::new(w, 128, 64),
                Operand::new(w, 1024, 24),
                Operand::new(w, 1088, 32),
                rows,
                &OpOptions::default(),
            ))
        },
        &["in_splits must have 2 entries, the group size, not 3"],
    ),
];

// ------------------------------------------------------------------ case helpers

/// Every op with a rank argument, given ranks that a 32-bit narrowing would turn into
/// rank 0 or 1 of the world-2 window `w` (and -1): each error, one per line.
fn ranks_beyond_32_bits(c: &Ctx) -> String {
    let w = &c.pair.windows[0];
    let opts = OpOptions::default();
    let kind = |r: symmwin::Result<()>| r.map_err(|e| e.kind().to_string()).err();
    let buf = Operand::new(w, 0, 64);
    let (root, peer) = (1i64 << 32, (1i64 << 32) + 1);
    let tile = Tile {
        rows: 1,
        cols: 16,
        row_stride: 16,
        elem: ElemType::F32,
    };
    let src = [0u8; 64];
    let registry = Registry::new();
    let mut lines = vec![
        format!(
            "broadcast: {:?}",
            kind(symmwin::broadcast(buf, root, &opts))
        ),
        format!(
            "put: {:?}",
            kind(symmwin::put_or_get(buf, peer, true, &opts))
        ),
        format!(
            "get: {:?}",
            kind(symmwin::put_or_get(buf, -1i64, false, &opts))
        ),
        format!(
            "wait_signal: {:?}",
            kind(symmwin::wait_signal(w, peer, &opts))
        ),
    ];
    let sig = Operand::new(w, 64, 8);
    let put_with_signal = symmwin::put_with_signal(buf, sig, 1, peer, &opts);
    lines.push(format!("put_with_signal: {:?}", kind(put_with_signal)));
    // SAFETY (test): `src` is 64 readable bytes of host memory for the call.
    let put_signal = unsafe { symmwin::put_signal(src.as_ptr() as usize, 64, buf, peer, &opts) };
    lines.push(format!("put_signal: {:?}", kind(put_signal)));
    let ins = [Operand::new(w, 0, 64)];
    let reduce = symmwin::tile_reduce(
        &ins,
        &[root],
        Operand::new(w, 128, 64),
        tile,
        ReduceOp::Sum,
        &opts,
    );
    lines.push(format!("tile_reduce: {:?}", kind(reduce)));
    // A world-2 group of its own for the wait by address (no rendezvous needed).
    let g = group(c, Arc::new(MemoryStore::new()), "wait-by-address", 0, 2);
    let word = src.as_ptr() as usize;
    // SAFETY (test): the peer is refused before the word is looked at.
    let wait = unsafe { symmwin::wait_for_signal_at(&registry, &g, word, 1, peer + 1, &opts) };
    lines.push(format!("wait_for_signal: {:?}", kind(wait)));
    lines.join("\n")
}

/// Ops whose written operand shares bytes with another operand of the same window.
fn aliased_operands(w: &Window) -> String {
    let opts = OpOptions::default();
    let at = |offset, len| Operand::new(w, offset, len);
    let rows = Rows {
        row_bytes: 16,
        in_rows: 4,
        out_rows: 6,
    };
    let tile = Tile {
        rows: 1,
        cols: 16,
        row_stride: 16,
        elem: ElemType::F32,
    };
    let vdev = |out: Operand, so: Operand| {
        symmwin::all_to_all_v(Shape::Flat, at(0, 64), out, at(1024, 16), so, rows, &opts)
    };
    [
        err(symmwin::all_to_all(at(0, 64), at(0, 64), 4, &opts)),
        err(symmwin::all_to_all(at(0, 64), at(32, 64), 4, &opts)),
        err(vdev(at(0, 96), at(2048, 32))),
        err(vdev(at(256, 96), at(1024, 32))),
        err(symmwin::put_with_signal(
            at(0, 64),
            at(56, 8),
            1,
            1usize,
            &opts,
        )),
        err(symmwin::tile_reduce(
            &[at(0, 64)],
            &[0usize],
            at(0, 64),
            tile,
            ReduceOp::Sum,
            &opts,
        )),
    ]
    .join("\n")
}

fn huge_span(c: &Ctx) -> String {
    // 64 TiB fits the address space once, but the window needs two of them.
    let a = match Allocation::new(c.provider.clone(), 1 << 46) {
        Ok(a) => a,
        Err(e) => return format!("[map] mmap(reserve) failed (already for one slot: {e})"),
    };
    fake_request_with(c, &a, 0, |r, _| r.encode(), None)
}

fn registry_freed(c: &Ctx) -> String {
    let reg = Registry::new();
    let p = reg.alloc(c.provider.clone(), 4096).unwrap();
    reg.free(p).unwrap();
    let g = solo(c);
    format!(
        "{:?}",
        reg.rendezvous(p, &g, 0).map(|o| o.map(|(_, off)| off))
    )
    .replace("Ok(None)", "None")
}

fn registry_foreign(c: &Ctx) -> String {
    let reg = Registry::new();
    let _mine = reg.alloc(c.provider.clone(), 4096).unwrap();
    let local = Box::new([0u8; 64]); // heap memory that is not ours
    let g = solo(c);
    let r = format!(
        "{:?}",
        reg.rendezvous(local.as_ptr() as usize, &g, 0)
            .map(|o| o.map(|(_, off)| off))
    );
    reg.free(_mine).unwrap();
    r.replace("Ok(None)", "None")
}

/// Both ranks of a world-2 group rendezvous through their registries; then rank 0
/// alone asks again for an interior pointer. A collective would time out; the
/// cache answers at once with the same window.
fn registry_cached(c: &Ctx) -> String {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let groups = [0, 1].map(|r| group(c, store.clone(), "reg", r, 2));
    let regs = [Registry::new(), Registry::new()];
    let ptrs = [0, 1].map(|r| regs[r].alloc(c.provider.clone(), 4096).unwrap());
    let layouts: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (reg, g, p) = (&regs[r], &groups[r], ptrs[r]);
                s.spawn(move || reg.rendezvous(p, g, 64).unwrap().unwrap().0.layout())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = Instant::now();
    let again = regs[0].rendezvous(ptrs[0] + 100, &groups[0], 64);
    let quick = start.elapsed() < Duration::from_millis(200);
    let out = match again {
        Ok(Some((w, off))) if quick && w.layout() == layouts[0] => {
            format!("cached same-layout offset={off}")
        }
        other => format!(
            "not cached: {:?} quick={quick}",
            other.map(|o| o.map(|x| x.1))
        ),
    };
    for r in 0..2 {
        regs[r].free(ptrs[r]).unwrap();
    }
    out
}

/// Two real ranks (threads) asking for different sizes: both fail, naming the field.
fn asymmetric(c: &Ctx) -> String {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let groups = [0, 1].map(|r| group(c, store.clone(), "asym", r, 2));
    let allocs = [4096, 8192].map(|n| Allocation::new(c.provider.clone(), n).unwrap());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (g, a) = (&groups[r], &allocs[r]);
                s.spawn(move || format!("rank {r}: {}", err(g.rendezvous(a))))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
            .join(" | ")
    })
}

fn export(memory: Box<dyn symmwin::Memory>) -> SharedHandle {
    memory.export().unwrap()
}

fn unsealed_memfd(len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    fd
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// A live socket of ours in a directory others can enter.
fn open_socket(c: &Ctx) -> PathBuf {
    let dir = c.scratch.join("open-sockets");
    let _ = std::fs::create_dir(&dir);
    set_mode(&dir, 0o755);
    let path = dir.join(format!("{:x}.sock", symmwin::testing::random_u64()));
    // Bound and dropped: the file stays, and the check refuses it before any send.
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    drop(sock);
    path
}

fn env_case(var: &str, value: &str) -> String {
    // The table is the only thread of this process while it runs a config case.
    let old = std::env::var_os(var);
    std::env::set_var(var, value);
    let got = err(Config::from_env());
    match old {
        Some(v) => std::env::set_var(var, v),
        None => std::env::remove_var(var),
    }
    got
}

/// Join a group in the socket directory `prepare` sets up (badly), given a fresh path.
fn socket_dir_case(c: &Ctx, prepare: impl FnOnce(PathBuf) -> PathBuf) -> String {
    let fresh = c
        .scratch
        .join(format!("sockdir-{:x}", symmwin::testing::random_u64()));
    let dir = prepare(fresh);
    let mut config = c.config.clone();
    config.socket_dir = dir;
    err(c.join_alone(GroupSpec::new("dirs", 0, 1), &config))
}

// ------------------------------------------------------------------ the fake rank 1

/// What the fake rank 1 does once its request is published: (its endpoint, rank 0's
/// request, its own request).
type AfterPublish<'a> = Box<dyn FnOnce(&mut Endpoint, &Request, &Request) + Send + 'a>;

/// Rank 0 of group "fake" (world 2, no pads) rendezvous on `alloc`; a fake rank 1
/// publishes `forge(rank 0's request re-labelled as rank 1)` and then does `then`.
fn fake_request_with(
    c: &Ctx,
    alloc: &Allocation,
    pads: usize,
    forge: impl FnOnce(Request, &Ctx) -> Vec<u8> + Send,
    then: Option<AfterPublish<'_>>,
) -> String {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut config = c.config.clone();
    config.timeout = Duration::from_millis(300);
    let g0 = common::group(
        GroupSpec::new("fake", 0, 2),
        store.clone(),
        &c.provider,
        &config,
    );
    std::thread::scope(|s| {
        let fake = s.spawn(|| {
            let ns = Namespace::new("fake");
            let mut endpoint = Endpoint::bind(&c.config.socket_dir, 99).unwrap();
            let (theirs, ours) = common::fake_rank1_requests(&*store, "fake", &endpoint).unwrap();
            store
                .set(&ns.request(0, 1), &forge(ours.clone(), c))
                .unwrap();
            if let Some(then) = then {
                then(&mut endpoint, &theirs, &ours);
            }
        });
        let got = err(g0.rendezvous_with_pads(alloc, pads));
        fake.join().unwrap();
        got
    })
}

fn fake_request(c: &Ctx, forge: impl FnOnce(Request, &Ctx) -> Vec<u8> + Send) -> String {
    let a = Allocation::new(c.provider.clone(), 4096).unwrap();
    fake_request_with(c, &a, 0, forge, None)
}

/// [`fake_request`] of rank 0's request re-labelled as rank 1's, then `edit`ed.
fn edited_request(c: &Ctx, edit: impl FnOnce(&mut Request) + Send) -> String {
    fake_request(c, |mut r, _| {
        edit(&mut r);
        r.encode()
    })
}

/// What the fake rank 1 sends through the real exchange: a handle and the size it
/// claims for it.
enum Forged {
    Handle(SharedHandle, u64),
}

fn fake_send(c: &Ctx, make: fn(&dyn Provider) -> Forged) -> String {
    let a = Allocation::new(c.provider.clone(), 4096).unwrap();
    let Forged::Handle(handle, size) = make(c.provider.as_ref());
    fake_request_with(
        c,
        &a,
        0,
        |r, _| r.encode(),
        Some(Box::new(move |endpoint, theirs, ours| {
            // Rank 0 fails after receiving; our own wait may time out. Either way is fine.
            let half = Duration::from_millis(500);
            let _ = common::fake_rank1_all_gather(
                endpoint,
                ("fake", size),
                (theirs, ours),
                &handle,
                half,
            );
        })),
    )
}

/// Before its real handle, the fake sends rank 0 garbage with an fd, a message
/// with a wrong token, a valid-looking message with two fds, and one too long.
/// Rank 0 must reject all four, close their fds, and map the real handle.
fn garbage_then_valid(c: &Ctx) -> String {
    let a = Allocation::new(c.provider.clone(), 4096).unwrap();
    let memory = c.provider.create(4096).unwrap();
    let handle = memory.export().unwrap();
    {
        let SharedHandle::Fd(fd) = &handle else {
            unreachable!()
        };
        // Mark the real memory so rank 0 can tell it mapped this one.
        // SAFETY: a fresh shared mapping of our own 4096-byte memfd.
        unsafe {
            let p = rustix::mm::mmap(
                std::ptr::null_mut(),
                4096,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )
            .unwrap();
            *(p as *mut u8) = 0x5a;
            rustix::mm::munmap(p, 4096).unwrap();
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let g0 = common::group(
        GroupSpec::new("fake", 0, 2),
        store.clone(),
        &c.provider,
        &c.config,
    );
    let result = std::thread::scope(|s| {
        let fake = s.spawn(|| {
            let ns = Namespace::new("fake");
            let mut endpoint = Endpoint::bind(&c.config.socket_dir, 99).unwrap();
            let (theirs, ours) = common::fake_rank1_requests(&*store, "fake", &endpoint).unwrap();
            let good = common::fd_message("fake", 0, 1, 2, &theirs.token);
            let mut buf = [0u8; FABRIC_LEN];
            let good_bytes = good.encode(&mut buf).to_vec();
            let extra = c.provider.create(4096).unwrap().export().unwrap();
            let (SharedHandle::Fd(fd), SharedHandle::Fd(extra)) = (&handle, &extra) else {
                unreachable!()
            };
            common::send_raw(&theirs.socket, b"not a message at all", &[fd.as_fd()]);
            let mut forged = good_bytes.clone();
            forged[40] ^= 1; // one token bit
            common::send_raw(&theirs.socket, &forged, &[fd.as_fd()]);
            common::send_raw(&theirs.socket, &good_bytes, &[fd.as_fd(), extra.as_fd()]);
            let mut long = good_bytes.clone();
            long.resize(FABRIC_LEN + 10, 0);
            common::send_raw(&theirs.socket, &long, &[fd.as_fd()]);
            store.set(&ns.request(0, 1), &ours.encode()).unwrap();
            let limit = Duration::from_secs(2);
            common::fake_rank1_all_gather(
                &mut endpoint,
                ("fake", 4096),
                (&theirs, &ours),
                &handle,
                limit,
            )
        });
        let got = g0.rendezvous_with_pads(&a, 0);
        let sent = fake.join().unwrap();
        (got, sent)
    });
    match result {
        (Ok(w), Ok(())) => {
            let mut b = [0u8];
            w.read(1, 0, &mut b).unwrap();
            format!(
                "ok rejected={} peer_byte={:#x}",
                g0.rejected_messages(),
                b[0]
            )
        }
        (got, sent) => format!("{:?} / {:?}", got.map(drop), sent),
    }
}
