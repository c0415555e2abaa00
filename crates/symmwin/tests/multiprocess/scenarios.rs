//! What each rank of a multi-process test does: the scenarios the worker runs, each
//! returning the line the test checks.

use super::*;

/// Every rank writes `rank+1` bytes into its chunk of every peer's slot.
pub(crate) fn visible(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let chunk = 4096 + 24;
    let alloc = Allocation::new(provider, chunk * world).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    let layout = window.layout();
    for r in 0..world {
        assert_eq!(window.slot(r).unwrap(), layout.base + r * layout.stride);
        let own = if r == rank {
            alloc.ptr()
        } else {
            window.slot(r).unwrap()
        };
        assert_eq!(window.ptr(r).unwrap(), own);
    }
    for peer in 0..world {
        window
            .write(peer, rank * chunk, &vec![rank as u8 + 1; chunk])
            .unwrap();
    }
    window.barrier(SignalOptions::default()).unwrap();
    // Read through the allocation's own mapping: the window aliases the same memory.
    // SAFETY: (test) the allocation maps `chunk * world` bytes while `alloc` lives.
    let own = unsafe { std::slice::from_raw_parts(alloc.ptr() as *const u8, chunk * world) };
    let wrong = (0..world)
        .filter(|&src| {
            own[src * chunk..(src + 1) * chunk]
                .iter()
                .any(|&b| b != src as u8 + 1)
        })
        .count();
    window.barrier(SignalOptions::default()).unwrap();
    // Traffic of one more rendezvous (the pad pool already exists): one message out
    // and one handle in per peer.
    let before = group.exchange_counts();
    let second = Allocation::new(alloc.provider().clone(), 4096).unwrap();
    drop(group.rendezvous(&second).unwrap());
    let after = group.exchange_counts();
    format!(
        "wrong_chunks={wrong} sent={} accepted={}",
        after.sent - before.sent,
        after.accepted - before.accepted
    )
}

/// Bytes of `len` at `ptr` (a live mapping of this process) that are not zero.
pub(crate) fn nonzero(ptr: usize, len: usize) -> usize {
    // SAFETY: the caller passes an allocation's own mapping, alive for the call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    bytes.iter().filter(|&&b| b != 0).count()
}

/// Rank 0 frees a window that rank 1 keeps writing into. Rank 0's new allocations of
/// that size never see those writes: the window is handed out again only after both
/// ranks freed it, and then whole (the next rendezvous sends one message to the peer,
/// its offer, and no handle).
pub(crate) fn late_write(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let size = 5 * 4096;
    let sync_alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let sync = group.rendezvous(&sync_alloc).unwrap();
    // A rendezvous of another size: it carries each rank's freed windows to the others.
    let announce = || {
        let a = Allocation::new(provider.clone(), 2 * 4096).unwrap();
        drop(group.rendezvous(&a).unwrap());
    };
    let mut kept = Some({
        let alloc = Allocation::new(provider.clone(), size).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        (alloc, window)
    });
    if rank == 0 {
        drop(kept.take());
    }
    let (mut late_hits, mut reused_early) = (0, 0);
    for _ in 0..3 {
        announce();
        let fresh = (rank == 0).then(|| Allocation::new(provider.clone(), size).unwrap());
        reused_early += fresh.as_ref().map_or(0, |f| usize::from(f.is_reused()));
        sync.barrier(SignalOptions::default()).unwrap();
        if let Some((_, window)) = &kept {
            window.write(0, 0, &vec![0xEE; size]).unwrap();
        }
        sync.barrier(SignalOptions::channel(1)).unwrap();
        late_hits += fresh.as_ref().map_or(0, |f| nonzero(f.ptr(), size));
    }
    // Rank 1 frees it too; the next rendezvous releases it on both ranks.
    drop(kept.take());
    announce();
    let again = Allocation::new(provider.clone(), size).unwrap();
    let dirty = nonzero(again.ptr(), size);
    let before = group.exchange_counts();
    let window = group.rendezvous(&again).unwrap();
    let after = group.exchange_counts();
    let (sent, handles) = (after.sent - before.sent, after.accepted - before.accepted);
    window.write(1 - rank, 64, &[rank as u8 + 1]).unwrap();
    window.barrier(SignalOptions::default()).unwrap();
    let mut peer = [0u8];
    window.read(rank, 64, &mut peer).unwrap();
    window.barrier(SignalOptions::channel(1)).unwrap();
    format!(
        "late_hits={late_hits} reused_early={reused_early} reused={} dirty={dirty} sent={sent} handles={handles} peer_byte={}",
        again.is_reused(),
        peer[0]
    )
}

pub(crate) fn cycles(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let cycles: usize = std::env::var("CYCLES").unwrap().parse().unwrap();
    let mut live: Vec<(Allocation, symmwin::Window)> = Vec::new();
    let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // A first window creates the pad pool, which lives as long as the group, and
    // stays to line the ranks up: every rank counts before any starts cycle 0, since
    // a fast peer's first handle, queued here early, would count as one of ours.
    let sync_alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let sync = group.rendezvous(&sync_alloc).unwrap();
    symmwin::adapter::testing::window_cache::flush();
    // The peer watcher's thread starts with the first rendezvous: its signal stack and
    // malloc arena appear a moment later, which is no leak.
    // The worker pool grows to the most jobs that ever ran at once (a rendezvous's
    // imports, a store call, the background lane): started at that size now, it
    // starts no thread during the count.
    symmwin::adapter::testing::worker::keep_idle(world + 2).unwrap();
    common::settle_threads();
    let (fds0, maps0, threads0) = (open_fds(), map_lines(), threads());
    sync.barrier(SignalOptions::default()).unwrap();
    let store = FileStore::new(std::env::var("STORE").unwrap()).unwrap();
    for i in 0..cycles {
        let size = 1 + (i * 7919) % (3 << 16);
        let alloc = Allocation::new(provider.clone(), size).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        window
            .write((rank + 1) % world, 0, &[(i % 251) as u8])
            .unwrap();
        live.push((alloc, window));
        // Each rank frees a random live window: the order differs between ranks.
        while live.len() > 4 || (i + 1 == cycles && !live.is_empty()) {
            let victim = (next() as usize) % live.len();
            live.swap_remove(victim);
        }
    }
    // Freed windows wait in the window cache; flushed, nothing may be left. One more
    // collective (on fresh memory, so with handles) so every rank has deleted its
    // last request key.
    symmwin::adapter::testing::window_cache::flush();
    let last_alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let last = group.rendezvous(&last_alloc).unwrap();
    last.barrier(SignalOptions::default()).unwrap();
    drop((last, last_alloc));
    symmwin::adapter::testing::window_cache::flush();
    let (fds1, maps1, threads1) = (open_fds(), map_lines(), threads());
    sync.barrier(SignalOptions::channel(1)).unwrap();
    format!(
        "fds={fds0}->{fds1} maps={}->{} keys={} pools={} threads={}->{}{}",
        maps0.len(),
        maps1.len(),
        store.len().unwrap(),
        group.pad_pool_count(),
        threads0.len(),
        threads1.len(),
        changed(&maps0, &maps1, &threads0, &threads1),
    )
}

/// This process's mappings, one line of `/proc/self/maps` each.
fn map_lines() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().map(str::to_owned).collect()
}

/// The mappings, and the threads, that came or went between two snapshots, for a
/// failure to show (empty when no mapping did).
fn changed(maps0: &[String], maps1: &[String], threads0: &[String], threads1: &[String]) -> String {
    let diff = |a: &[String], b: &[String]| -> Vec<String> {
        b.iter().filter(|x| !a.contains(x)).cloned().collect()
    };
    let (came, went) = (diff(maps0, maps1), diff(maps1, maps0));
    if came.is_empty() && went.is_empty() {
        return String::new();
    }
    let (started, ended) = (diff(threads0, threads1), diff(threads1, threads0));
    format!(" (mappings came: {came:?}; went: {went:?}; threads started: {started:?}; ended: {ended:?})")
}

/// This process's threads, as `tid:name`.
fn threads() -> Vec<String> {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap().flatten();
    let named = |t: std::fs::DirEntry| {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        format!("{}:{}", t.file_name().to_string_lossy(), name.trim())
    };
    tasks.map(named).collect()
}

pub(crate) fn mismatch(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let alloc = Allocation::new(provider, 4096 * (1 + usize::from(rank == 1))).unwrap();
    let err = group.rendezvous(&alloc).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Mismatch { field: "size", .. }),
        "{err}"
    );
    err.to_string()
}

/// The last rank dies (before or after publishing its request); the others report it.
pub(crate) fn die_or_wait(rank: usize, world: usize, publish_first: bool) -> String {
    let (group, provider) = join(rank, world);
    if rank == world - 1 {
        if publish_first {
            publish_and_vanish(rank, world);
        }
        std::process::exit(3);
    }
    let alloc = Allocation::new(provider, 4096).unwrap();
    let start = Instant::now();
    let err = group.rendezvous(&alloc).unwrap_err();
    format!("{:.3}s {err}", start.elapsed().as_secs_f64())
}

/// Publish a well-formed request for seq 0 whose process then dies before sending.
pub(crate) fn publish_and_vanish(rank: usize, world: usize) {
    let endpoint = symmwin::adapter::testing::Endpoint::bind(
        Path::new(&std::env::var("SYMMWIN_SOCKET_DIR").unwrap()),
        0,
    )
    .unwrap();
    let info = HostProvider::new().info();
    let request = symmwin::adapter::testing::Request {
        version: symmwin::adapter::testing::PROTOCOL_VERSION.into(),
        group: "test".into(),
        seq: 0,
        rank,
        world,
        provider: info.kind,
        handle_type: info.handle_type,
        device: info.device,
        size: 4096,
        alloc_size: 4096,
        pad_size: symmwin::DEFAULT_PAD_SIZE,
        pad_pools: 0,
        pad_free: vec![],
        pad_scrub: vec![],
        foreign_calls: 0,
        pid: std::process::id(),
        start_time: 0,
        written_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
        remote_transport: false,
        uid: rustix::process::getuid().as_raw(),
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        locality: symmwin::adapter::testing::Locality::here(
            std::env::var("SYMMWIN_HOST_ID").ok().as_deref(),
            Path::new(&std::env::var("SYMMWIN_SOCKET_DIR").unwrap()),
            None,
        )
        .unwrap(),
        fabric_handle: None,
        socket: endpoint.path().to_path_buf(),
        token: endpoint.token().to_hex(),
    };
    let store = FileStore::new(std::env::var("STORE").unwrap()).unwrap();
    store
        .set(
            &symmwin::adapter::testing::Namespace::new("test").request(0, rank),
            &request.encode(),
        )
        .unwrap();
    std::mem::forget(endpoint); // dying processes leave their socket behind
}

pub(crate) fn signals(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    let alloc = Allocation::new(provider, 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    let rounds = 200;
    for i in 0..rounds {
        window.barrier(SignalOptions::channel(i % 4)).unwrap();
    }
    // A ring of put/wait on channel 1.
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    for _ in 0..rounds {
        window.put_signal(next, SignalOptions::channel(1)).unwrap();
        window.wait_signal(prev, SignalOptions::channel(1)).unwrap();
    }
    let bad_channel = window.barrier(SignalOptions::channel(1 << 20)).unwrap_err();
    window.barrier(SignalOptions::default()).unwrap();
    // Pads are zero at rest once every signal has been consumed.
    let pads = window.pad_ptrs();
    // SAFETY: (test) this rank's pad is mapped for pad_size bytes while `window` lives.
    let own =
        unsafe { std::slice::from_raw_parts(pads[rank] as *const u32, window.pad_size() / 4) };
    let nonzero = own.iter().filter(|&&w| w != 0).count();
    // A wait nobody answers times out naming the peer, unless a peer's same wait timed
    // out first and poisoned the window; either way the next call is refused rather
    // than paired with a stale post.
    let err = window
        .wait_signal(
            prev,
            SignalOptions::channel(2).timeout(Duration::from_millis(100)),
        )
        .unwrap_err();
    let named = err.peer() == Some(prev) && err.is_timeout();
    let first = named || matches!(err.kind(), ErrorKind::Poisoned(_));
    let after = window.barrier(SignalOptions::default()).unwrap_err();
    format!(
        "nonzero={nonzero} timeout_named_or_refused={first} bad_channel={} then_poisoned={}",
        matches!(bad_channel.kind(), ErrorKind::InvalidArgument(_)),
        matches!(after.kind(), ErrorKind::Poisoned(_))
    )
}

/// The file the intruder creates once it has sprayed every socket.
pub(crate) fn intruder_done() -> PathBuf {
    Path::new(&std::env::var("STORE").unwrap()).with_file_name("intruder-done")
}

/// Wait (bounded) until `ready` holds: steps of a scenario are ordered by what the
/// other processes did, never by how long they usually take.
pub(crate) fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + DEFAULT_LIMIT;
    while !ready() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Rank 1 comes once an intruder has sprayed forged handles at every socket, so they
/// are queued at rank 0 before rank 1's real messages.
pub(crate) fn intruded(rank: usize, world: usize) -> String {
    let (group, provider) = join(rank, world);
    if rank == 1 {
        wait_until("the intruder sprayed the sockets", || {
            intruder_done().exists()
        });
    }
    let alloc = Allocation::new(provider, 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    window.write(1 - rank, 0, &[0xA0 + rank as u8]).unwrap();
    window.barrier(SignalOptions::default()).unwrap();
    let mut got = [0u8];
    window.read(rank, 0, &mut got).unwrap();
    format!(
        "peer_byte={:#x} rejected={}",
        got[0],
        group.rejected_messages()
    )
}

/// Send forged messages (guessed token, valid everything else) with a real memfd.
pub(crate) fn forge_to_all(dir: &Path) -> usize {
    let mut sent = 0;
    let memory = HostProvider::new().create(4096).unwrap();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let msg = common::fd_message("test", 0, 1, 2, &"07".repeat(16));
        let mut buf = [0u8; FABRIC_LEN];
        let symmwin::adapter::SharedHandle::Fd(fd) = memory.export().unwrap() else {
            unreachable!()
        };
        let fds = [std::os::fd::AsFd::as_fd(&fd)];
        if common::try_send_raw(&entry.path(), msg.encode(&mut buf), &fds).is_ok() {
            sent += 1;
        }
        // Garbage, too.
        let _ = common::try_send_raw(&entry.path(), b"not a message", &[]);
    }
    sent
}

pub(crate) fn intruder() -> String {
    let dir = PathBuf::from(std::env::var("SYMMWIN_SOCKET_DIR").unwrap());
    // Both ranks have joined (bound their sockets) before anything is sent.
    wait_until("both ranks bound their sockets", || {
        common::entries(&dir) >= 2
    });
    let sent = forge_to_all(&dir);
    std::fs::write(intruder_done(), b"").unwrap();
    format!("sent={sent}")
}

/// Run as another uid: try to reach a socket in our private directory, to plant a
/// socket next to it, and to read the socket directory, the store and a store key.
pub(crate) fn other_uid() -> String {
    let target = PathBuf::from(std::env::var("TARGET_SOCKET").unwrap());
    let key = PathBuf::from(std::env::var("TARGET_KEY").unwrap());
    let errno = |r: Result<(), std::io::Error>| match r {
        Ok(()) => "allowed".to_owned(),
        Err(e) => format!("errno{}", e.raw_os_error().unwrap_or(-1)),
    };
    let dgram = || {
        rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::DGRAM,
            None,
        )
        .unwrap()
    };
    let addr = rustix::net::SocketAddrUnix::new(&target).unwrap();
    let send = errno(
        rustix::net::sendto(dgram(), b"hello", rustix::net::SendFlags::empty(), &addr)
            .map(drop)
            .map_err(Into::into),
    );
    let connect = errno(rustix::net::connect(dgram(), &addr).map_err(Into::into));
    let planted = target.with_file_name("planted.sock");
    let bind = errno(
        rustix::net::bind(
            dgram(),
            &rustix::net::SocketAddrUnix::new(&planted).unwrap(),
        )
        .map_err(Into::into),
    );
    let list_sockets = errno(std::fs::read_dir(target.parent().unwrap()).map(drop));
    let list_store = errno(std::fs::read_dir(key.parent().unwrap()).map(drop));
    let read_key = errno(std::fs::read(&key).map(drop));
    format!(
        "send={send} connect={connect} bind={bind} list_sockets={list_sockets} \
         list_store={list_store} read_key={read_key}"
    )
}
