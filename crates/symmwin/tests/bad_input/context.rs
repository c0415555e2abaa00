//! The context every case gets: the provider, the configuration, a scratch
//! directory and the live pair of windows that must survive every case.

use super::*;

/// What every case can use.
pub(crate) struct Ctx {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) config: Config,
    /// A scratch directory of the job (for socket directories and stores).
    pub(crate) scratch: PathBuf,
    /// The live pair of windows that must survive every case (rank 0 and rank 1).
    pub(crate) pair: Pair,
}

impl Ctx {
    /// Join `spec` alone, on a fresh memory store, with this context's provider and
    /// `config` (the case's own or the context's).
    pub(crate) fn join_alone(&self, spec: GroupSpec, config: &Config) -> symmwin::Result<Group> {
        Group::new(
            spec,
            Arc::new(MemoryStore::new()),
            self.provider.clone(),
            config,
        )
    }
}

pub(crate) struct Pair {
    pub(crate) allocs: [Allocation; 2],
    pub(crate) windows: [Window; 2],
}

pub(crate) fn group(
    ctx: &Ctx,
    store: Arc<dyn Store>,
    name: &str,
    rank: usize,
    world: usize,
) -> Group {
    Group::new(
        GroupSpec::new(name, rank, world),
        store,
        ctx.provider.clone(),
        &ctx.config,
    )
    .unwrap()
}

pub(crate) fn make_pair(provider: &Arc<dyn Provider>, config: &Config) -> Pair {
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
    pub(crate) fn check(&self, round: u8) -> Result<(), String> {
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
