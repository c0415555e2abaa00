//! Fuzzing with proptest (cargo-fuzz needs a nightly toolchain, which this project
//! does not use): the wire decoder, the request decoder and `validate`, and the
//! receive path of a live endpoint during a real rendezvous.
//!
//! Each target runs `PROPTEST_CASES` cases (default 256) from a fixed seed, unless
//! `PROPTEST_RNG_SEED` says otherwise, and prints how many it executed. The long run
//! is in docs/RELIABILITY.md.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use symmwin::adapter::testing::Endpoint;
use symmwin::adapter::testing::Namespace;
use symmwin::adapter::testing::{validate, Request, PROTOCOL_VERSION};
use symmwin::adapter::testing::{Message, Payload, FABRIC_LEN, FD_LEN};
use symmwin::adapter::{HandleType, ProviderKind, SharedHandle};
use symmwin::{Allocation, GroupSpec, HostProvider, MemoryStore, Provider, Store};

/// The runner every target uses: case count from `PROPTEST_CASES`, a fixed seed
/// unless `PROPTEST_RNG_SEED` is set, nothing written to disk.
fn runner() -> TestRunner {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x5717_3a11);
    }
    config.failure_persistence = None;
    TestRunner::new(config)
}

/// Run `test` on inputs from `strategy`, then report executions and wall time.
fn fuzz<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let runs = AtomicU64::new(0);
    let start = Instant::now();
    let result = runner().run(&strategy, |input| {
        runs.fetch_add(1, Ordering::Relaxed);
        test(input)
    });
    eprintln!(
        "fuzz {name}: {} executions in {:.1} s",
        runs.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
}

// ------------------------------------------------------------------ wire decoder

fn valid_message() -> impl Strategy<Value = Message> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<u64>(),
        proptest::option::of(any::<[u8; 32]>()),
    )
        .prop_map(|(group, seq, sender, world, token, size, fabric)| Message {
            group,
            seq,
            sender,
            world,
            token,
            physical_size: size,
            offer: Default::default(),
            payload: match fabric {
                Some(h) => {
                    let mut handle = [0u8; 64];
                    handle[..32].copy_from_slice(&h);
                    handle[32..].copy_from_slice(&h);
                    Payload::Fabric(handle)
                }
                None => Payload::Fd,
            },
        })
}

/// Random bytes, or a valid message with a few bytes changed and perhaps resized.
fn wire_input() -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        valid_message(),
        proptest::collection::vec((0..FABRIC_LEN, any::<u8>()), 0..4),
        proptest::option::of(0..FABRIC_LEN + 8),
    )
        .prop_map(|(m, edits, len)| {
            let mut buf = [0u8; FABRIC_LEN];
            let mut bytes = m.encode(&mut buf).to_vec();
            for (at, x) in edits {
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= x;
                }
            }
            if let Some(len) = len {
                bytes.resize(len, 0xee);
            }
            bytes
        });
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        proptest::collection::vec(any::<u8>(), FD_LEN..=FD_LEN),
        mutated,
    ]
}

#[test]
fn fuzz_wire_decoder() {
    let decoded = AtomicU64::new(0);
    fuzz("wire decoder", wire_input(), |bytes| {
        if let Ok(m) = Message::decode(&bytes) {
            decoded.fetch_add(1, Ordering::Relaxed);
            // Whatever decodes is exactly a message: it re-encodes to the same bytes
            // (but for the reserved byte, which the decoder ignores).
            prop_assert!(bytes.len() == FD_LEN || bytes.len() == FABRIC_LEN);
            let mut buf = [0u8; FABRIC_LEN];
            let again = m.encode(&mut buf).to_vec();
            let mut expected = bytes.clone();
            expected[7] = 0;
            prop_assert_eq!(again, expected);
        }
        Ok(())
    });
    eprintln!(
        "fuzz wire decoder: {} inputs decoded",
        decoded.load(Ordering::Relaxed)
    );
}

// ------------------------------------------------------------------ requests

fn sample_request(rank: usize) -> Request {
    Request {
        version: PROTOCOL_VERSION.into(),
        group: "g".into(),
        seq: 3,
        rank,
        world: 2,
        provider: ProviderKind::Host,
        handle_type: HandleType::PosixFd,
        device: -1,
        size: 4096,
        alloc_size: 4096,
        pad_size: 9216,
        pad_pools: 1,
        pad_free: vec![u64::MAX - 1],
        pad_scrub: vec![],
        foreign_calls: 0,
        pid: 10 + rank as u32,
        start_time: 0,
        written_at_ms: 0,
        remote_transport: false,
        uid: 1000,
        host: "h".into(),
        locality: symmwin::adapter::testing::Locality {
            host_id: String::new(),
            boot_id: "b".into(),
            uid: 1000,
            socket_dir: symmwin::adapter::testing::DirIdentity { dev: 1, ino: 2 },
            pid_namespace: 1,
            fabric_domain: None,
        },
        fabric_handle: None,
        socket: format!("/run/s/{rank}.sock").into(),
        token: "ab".repeat(16),
    }
}

/// Random bytes, or a valid request's JSON with bytes changed, cut or spliced.
fn json_input() -> impl Strategy<Value = Vec<u8>> {
    let json = sample_request(1).encode();
    let len = json.len();
    let edited = (
        proptest::collection::vec((0..len, any::<u8>()), 0..6),
        proptest::option::of(0..len),
        proptest::option::of((0..len, "[-0-9a-z\":,{}\\[\\] .e+]{0,12}")),
    )
        .prop_map(move |(edits, cut, splice)| {
            let mut bytes = json.clone();
            if let Some((at, text)) = splice {
                bytes.splice(at..at, text.into_bytes());
            }
            for (at, x) in edits {
                let n = bytes.len();
                bytes[at % n] ^= x;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut);
            }
            bytes
        });
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..300), edited]
}

#[test]
fn fuzz_request_decoder_and_validate() {
    let decoded = AtomicU64::new(0);
    fuzz("request decoder", json_input(), |bytes| {
        match Request::decode("symmwin/g/3/req/1", 1, &bytes) {
            Ok(r) => {
                decoded.fetch_add(1, Ordering::Relaxed);
                prop_assert_eq!(r.rank, 1);
                // Whatever decodes goes through validation without a panic, and a
                // request that agrees with a well-formed peer on every field passes.
                let peer = sample_request(0);
                let verdict = validate(&[peer.clone(), r.clone()]);
                let agrees = r.version == peer.version
                    && r.group == peer.group
                    && r.seq == peer.seq
                    && r.world == peer.world
                    && r.provider == peer.provider
                    && r.handle_type == peer.handle_type
                    && r.size == peer.size
                    && r.alloc_size == peer.alloc_size
                    && r.pad_size == peer.pad_size
                    && r.pad_pools == peer.pad_pools
                    && r.foreign_calls == peer.foreign_calls;
                prop_assert_eq!(verdict.is_ok(), agrees, "{:?}", verdict.err());
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.contains("corrupt store value for key symmwin/g/3/req/1"));
                prop_assert_eq!(e.peer(), Some(1));
            }
        }
        Ok(())
    });
    eprintln!(
        "fuzz request decoder: {} inputs decoded",
        decoded.load(Ordering::Relaxed)
    );
}

/// Requests whose fields come from tiny domains, so that they often agree.
fn request_set() -> impl Strategy<Value = Vec<Request>> {
    let one = (
        0..2u32,
        0..2u64,
        1..4usize,
        0..2usize,
        0..2usize,
        0..2usize,
        any::<bool>(),
        any::<bool>(),
    );
    proptest::collection::vec(one, 1..5).prop_map(|fields| {
        fields
            .into_iter()
            .enumerate()
            .map(|(rank, (v, seq, world, size, pads, pools, host, fabric))| {
                let mut r = sample_request(rank);
                r.version = u32::from(PROTOCOL_VERSION) + v;
                r.seq = seq;
                r.world = world;
                r.size = 4096 << size;
                r.pad_size = pads * 4;
                r.pad_pools = pools;
                r.host = if host { "a".into() } else { "b".into() };
                if fabric {
                    r.handle_type = HandleType::Fabric;
                }
                r
            })
            .collect()
    })
}

#[test]
fn fuzz_validate_agrees_exactly_when_requests_agree() {
    let agreed = AtomicU64::new(0);
    fuzz("validate", request_set(), |reqs| {
        let verdict = validate(&reqs);
        let first = &reqs[0];
        let differs: Vec<&str> = [
            ("version", reqs.iter().any(|r| r.version != first.version)),
            ("seq", reqs.iter().any(|r| r.seq != first.seq)),
            ("world", reqs.iter().any(|r| r.world != first.world)),
            (
                "handle_type",
                reqs.iter().any(|r| r.handle_type != first.handle_type),
            ),
            ("size", reqs.iter().any(|r| r.size != first.size)),
            (
                "pad_size",
                reqs.iter().any(|r| r.pad_size != first.pad_size),
            ),
            (
                "pad_pools",
                reqs.iter().any(|r| r.pad_pools != first.pad_pools),
            ),
        ]
        .into_iter()
        .filter_map(|(f, d)| d.then_some(f))
        .collect();
        let complete = reqs.len() == first.world;
        match verdict {
            Ok(()) => {
                agreed.fetch_add(1, Ordering::Relaxed);
                prop_assert!(differs.is_empty() && complete)
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(
                    differs
                        .iter()
                        .any(|f| text.contains(&format!("ranks disagree on {f}:")))
                        || (differs.is_empty()
                            && !complete
                            && text.contains("requests for world size")),
                    "{text} / differs {differs:?}"
                );
            }
        }
        Ok(())
    });
    eprintln!(
        "fuzz validate: {} sets agreed",
        agreed.load(Ordering::Relaxed)
    );
}

// ------------------------------------------------------------------ live endpoint

/// An fd to attach to a datagram.
#[derive(Debug, Clone, Copy)]
enum FdKind {
    Sealed,
    Unsealed,
    DevNull,
    Socket,
}

/// A datagram that must be rejected.
#[derive(Debug, Clone)]
enum Junk {
    /// Random bytes.
    Random(Vec<u8>),
    /// The real message with a wrong token and perhaps more damage.
    WrongToken {
        bit: usize,
        edits: Vec<(usize, u8)>,
        len: Option<usize>,
    },
    /// Right token, but a sender that is not a peer (ourselves, or out of range).
    NotAPeer(u32),
    /// Right token and sender, but the wrong number of fds for the payload.
    BadFds,
}

fn junk() -> impl Strategy<Value = (Junk, Vec<FdKind>)> {
    let kind = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..160).prop_map(Junk::Random),
        (
            0..128usize,
            proptest::collection::vec((0..FABRIC_LEN, any::<u8>()), 0..3),
            proptest::option::of(0..FABRIC_LEN + 8)
        )
            .prop_map(|(bit, edits, len)| Junk::WrongToken { bit, edits, len }),
        prop_oneof![Just(0u32), 2..u32::MAX].prop_map(Junk::NotAPeer),
        Just(Junk::BadFds),
    ];
    let fd = prop_oneof![
        Just(FdKind::Sealed),
        Just(FdKind::Unsealed),
        Just(FdKind::DevNull),
        Just(FdKind::Socket),
    ];
    (kind, proptest::collection::vec(fd, 0..11))
}

fn make_fd(provider: &dyn Provider, kind: FdKind) -> OwnedFd {
    match kind {
        FdKind::Sealed => match provider.create(4096).unwrap().export().unwrap() {
            SharedHandle::Fd(fd) => fd,
            SharedHandle::Fabric(_) => unreachable!(),
        },
        FdKind::Unsealed => {
            let fd = rustix::fs::memfd_create("junk", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
            rustix::fs::ftruncate(&fd, 4096).unwrap();
            fd
        }
        FdKind::DevNull => std::fs::File::open("/dev/null").unwrap().into(),
        FdKind::Socket => std::os::unix::net::UnixStream::pair().unwrap().0.into(),
    }
}

/// The bytes of one junk datagram, given the valid message it imitates.
fn junk_bytes(junk: &Junk, valid: &Message, fds: usize) -> Vec<u8> {
    let mut buf = [0u8; FABRIC_LEN];
    match junk {
        Junk::Random(bytes) => bytes.clone(),
        Junk::WrongToken { bit, edits, len } => {
            let mut bytes = valid.encode(&mut buf).to_vec();
            bytes[32 + bit / 8] ^= 1 << (bit % 8);
            for &(at, x) in edits {
                // Damage anywhere but the token, which must stay wrong.
                if let Some(b) = bytes.get_mut(at).filter(|_| !(32..48).contains(&at)) {
                    *b ^= x;
                }
            }
            if let Some(len) = len {
                bytes.resize(*len, 0);
            }
            bytes
        }
        Junk::NotAPeer(sender) => Message {
            sender: *sender,
            ..*valid
        }
        .encode(&mut buf)
        .to_vec(),
        Junk::BadFds => {
            // One fd where a fabric handle needs none, or not exactly one for an fd.
            let payload = if fds == 1 {
                Payload::Fabric([1; 64])
            } else {
                Payload::Fd
            };
            Message { payload, ..*valid }.encode(&mut buf).to_vec()
        }
    }
}

/// One rendezvous of a real rank 0 with a fake rank 1 that first sends `junk`.
fn junk_rendezvous(
    provider: &Arc<dyn Provider>,
    config: &symmwin::Config,
    junk: &[(Junk, Vec<FdKind>)],
) -> Result<(), TestCaseError> {
    let fds_before = common::open_fds();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let group = common::group(
        GroupSpec::new("fuzz", 0, 2),
        store.clone(),
        provider,
        config,
    );
    let alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let marker = junk.len() as u8 ^ 0xa5;
    let (got, sent) = std::thread::scope(|s| {
        let fake = s.spawn(|| -> Result<(), String> {
            let ns = Namespace::new("fuzz");
            let mut endpoint = Endpoint::bind(&config.socket_dir, 7).map_err(|e| e.to_string())?;
            let (theirs, ours) = common::fake_rank1_requests(&*store, "fuzz", &endpoint)?;
            store.set(&ns.request(0, 1), &ours.encode()).unwrap();
            let valid = common::fd_message("fuzz", 0, 1, 2, &theirs.token);
            for (kind, fd_kinds) in junk {
                let fds: Vec<OwnedFd> = fd_kinds
                    .iter()
                    .map(|&k| make_fd(provider.as_ref(), k))
                    .collect();
                let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
                let bytes = junk_bytes(kind, &valid, fds.len());
                common::send_raw(&theirs.socket, &bytes, &borrowed);
            }
            let memory = provider.create(4096).unwrap();
            let handle = memory.export().unwrap();
            let mut view = provider.reserve(4096).unwrap();
            view.map(0, memory.as_ref()).unwrap();
            // SAFETY: the page was just mapped read-write.
            unsafe { *(view.base() as *mut u8) = marker };
            let limit = Duration::from_secs(5);
            let pair = (&theirs, &ours);
            common::fake_rank1_all_gather(&mut endpoint, ("fuzz", 4096), pair, &handle, limit)
                .map_err(|e| e.to_string())
        });
        let got = group.rendezvous_with_pads(&alloc, 0);
        (got, fake.join().unwrap())
    });
    let window = got.map_err(|e| TestCaseError::fail(format!("rank 0: {e}")))?;
    sent.map_err(|e| TestCaseError::fail(format!("fake rank 1: {e}")))?;
    let mut byte = [0u8];
    window.read(1, 0, &mut byte).unwrap();
    prop_assert_eq!(byte[0], marker, "rank 0 mapped something else as rank 1");
    prop_assert_eq!(group.rejected_messages(), junk.len() as u64);
    drop(window);
    drop(alloc);
    drop(group);
    prop_assert_eq!(common::open_fds(), fds_before, "fds leaked");
    Ok(())
}

#[test]
fn fuzz_live_endpoint_receive_path() {
    let job = common::Job::new("fuzz");
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let mut config = symmwin::Config::from_env().unwrap();
    config.socket_dir = job.sockets();
    config.timeout = Duration::from_secs(5);
    let datagrams = AtomicU64::new(0);
    fuzz(
        "live endpoint",
        proptest::collection::vec(junk(), 0..13),
        |junk| {
            datagrams.fetch_add(junk.len() as u64, Ordering::Relaxed);
            junk_rendezvous(&provider, &config, &junk)
        },
    );
    eprintln!(
        "fuzz live endpoint: {} junk datagrams rejected",
        datagrams.load(Ordering::Relaxed)
    );
}
