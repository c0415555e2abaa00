//! The table: each case's name, the wrong call, and the texts its error must hold.

use super::*;

pub(crate) type Case = (&'static str, fn(&Ctx) -> String, &'static [&'static str]);

pub(crate) const CASES: &[Case] = &[
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
        "wait_signal nobody answers (on a pair of its own: the timeout poisons it)",
        |c| {
            let own = make_pair(&c.provider, &c.config);
            let first = own.windows[0].wait_signal(
                1,
                SignalOptions::channel(5).timeout(Duration::from_millis(50)),
            );
            let next = own.windows[1].barrier(SignalOptions::default());
            format!("{} | then: {}", err(first), err(next))
        },
        &[
            "peer 1",
            "timed out after 0.05 s waiting for rank(s) [1]",
            "now poisoned on every rank",
            "then: symmwin rank 1 [signal]: this window is poisoned: wait_signal on channel 5",
        ],
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
            "ranks disagree on version: ",
            " on rank(s) [0]; 99 on rank(s) [1] (the ranks run symmwin builds that speak",
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
                return "SKIP needs root (to give a directory to another user)".into();
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
            err(symmwin::ops::all_to_all(input, out, 4, &OpOptions::default()))
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
            err(symmwin::ops::all_to_all_v(
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
