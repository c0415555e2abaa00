//! The cases too long for a line of the table, and what they share.

use super::*;

/// Every op with a rank argument, given ranks that a 32-bit narrowing would turn into
/// rank 0 or 1 of the world-2 window `w` (and -1): each error, one per line.
pub(crate) fn ranks_beyond_32_bits(c: &Ctx) -> String {
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
            kind(symmwin::ops::broadcast(buf, root, &opts))
        ),
        format!(
            "put: {:?}",
            kind(symmwin::ops::put_or_get(buf, peer, true, &opts))
        ),
        format!(
            "get: {:?}",
            kind(symmwin::ops::put_or_get(buf, -1i64, false, &opts))
        ),
        format!(
            "wait_signal: {:?}",
            kind(symmwin::ops::wait_signal(w, peer, &opts))
        ),
    ];
    let sig = Operand::new(w, 64, 8);
    let put_with_signal = symmwin::ops::put_with_signal(buf, sig, 1, peer, &opts);
    lines.push(format!("put_with_signal: {:?}", kind(put_with_signal)));
    // SAFETY (test): `src` is 64 readable bytes of host memory for the call.
    let put_signal =
        unsafe { symmwin::ops::put_signal(src.as_ptr() as usize, 64, buf, peer, &opts) };
    lines.push(format!("put_signal: {:?}", kind(put_signal)));
    let ins = [Operand::new(w, 0, 64)];
    let reduce = symmwin::ops::tile_reduce(
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
    let wait = unsafe { symmwin::ops::wait_for_signal_at(&registry, &g, word, 1, peer + 1, &opts) };
    lines.push(format!("wait_for_signal: {:?}", kind(wait)));
    lines.join("\n")
}

/// Ops whose written operand shares bytes with another operand of the same window.
pub(crate) fn aliased_operands(w: &Window) -> String {
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
        symmwin::ops::all_to_all_v(Shape::Flat, at(0, 64), out, at(1024, 16), so, rows, &opts)
    };
    [
        err(symmwin::ops::all_to_all(at(0, 64), at(0, 64), 4, &opts)),
        err(symmwin::ops::all_to_all(at(0, 64), at(32, 64), 4, &opts)),
        err(vdev(at(0, 96), at(2048, 32))),
        err(vdev(at(256, 96), at(1024, 32))),
        err(symmwin::ops::put_with_signal(
            at(0, 64),
            at(56, 8),
            1,
            1usize,
            &opts,
        )),
        err(symmwin::ops::tile_reduce(
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

pub(crate) fn huge_span(c: &Ctx) -> String {
    // 64 TiB fits the address space once, but the window needs two of them.
    let a = match Allocation::new(c.provider.clone(), 1 << 46) {
        Ok(a) => a,
        Err(e) => return format!("[map] mmap(reserve) failed (already for one slot: {e})"),
    };
    fake_request_with(c, &a, 0, |r, _| r.encode(), None)
}

pub(crate) fn registry_freed(c: &Ctx) -> String {
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

pub(crate) fn registry_foreign(c: &Ctx) -> String {
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
pub(crate) fn registry_cached(c: &Ctx) -> String {
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
pub(crate) fn asymmetric(c: &Ctx) -> String {
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

pub(crate) fn export(memory: Box<dyn symmwin::adapter::Memory>) -> SharedHandle {
    memory.export().unwrap()
}

pub(crate) fn unsealed_memfd(len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    fd
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// A live socket of ours in a directory others can enter.
pub(crate) fn open_socket(c: &Ctx) -> PathBuf {
    let dir = c.scratch.join("open-sockets");
    let _ = std::fs::create_dir(&dir);
    set_mode(&dir, 0o755);
    let path = dir.join(format!(
        "{:x}.sock",
        symmwin::adapter::testing::random_u64()
    ));
    // Bound and dropped: the file stays, and the check refuses it before any send.
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    drop(sock);
    path
}

pub(crate) fn env_case(var: &str, value: &str) -> String {
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
pub(crate) fn socket_dir_case(c: &Ctx, prepare: impl FnOnce(PathBuf) -> PathBuf) -> String {
    let fresh = c.scratch.join(format!(
        "sockdir-{:x}",
        symmwin::adapter::testing::random_u64()
    ));
    let dir = prepare(fresh);
    let mut config = c.config.clone();
    config.socket_dir = dir;
    err(c.join_alone(GroupSpec::new("dirs", 0, 1), &config))
}
