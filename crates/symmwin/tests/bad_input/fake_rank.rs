//! The fake rank 1: publishes a crafted request and sends crafted handles to rank 0.

use super::*;

/// What the fake rank 1 does once its request is published: (its endpoint, rank 0's
/// request, its own request).
pub(crate) type AfterPublish<'a> = Box<dyn FnOnce(&mut Endpoint, &Request, &Request) + Send + 'a>;

/// Rank 0 of group "fake" (world 2, no pads) rendezvous on `alloc`; a fake rank 1
/// publishes `forge(rank 0's request re-labelled as rank 1)` and then does `then`.
pub(crate) fn fake_request_with(
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

pub(crate) fn fake_request(c: &Ctx, forge: impl FnOnce(Request, &Ctx) -> Vec<u8> + Send) -> String {
    let a = Allocation::new(c.provider.clone(), 4096).unwrap();
    fake_request_with(c, &a, 0, forge, None)
}

/// [`fake_request`] of rank 0's request re-labelled as rank 1's, then `edit`ed.
pub(crate) fn edited_request(c: &Ctx, edit: impl FnOnce(&mut Request) + Send) -> String {
    fake_request(c, |mut r, _| {
        edit(&mut r);
        r.encode()
    })
}

/// What the fake rank 1 sends through the real exchange: a handle and the size it
/// claims for it.
pub(crate) enum Forged {
    Handle(SharedHandle, u64),
}

pub(crate) fn fake_send(c: &Ctx, make: fn(&dyn Provider) -> Forged) -> String {
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
pub(crate) fn garbage_then_valid(c: &Ctx) -> String {
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
