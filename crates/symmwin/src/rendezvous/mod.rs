//! Rendezvous: publish a request, check that every rank agrees, exchange handles,
//! import, and map every rank's memory into one flat span.

mod claim;
mod import;
pub mod locality;
pub mod request;
mod reuse;
mod spanning;

use std::time::Instant;

use crate::allocation::Allocation;
use crate::error::{Error, ErrorKind, Phase, Result};
use crate::exchange::{PeerAddress, Round};
use crate::group::{Group, GroupShared, GroupState};
use crate::layout::FlatLayout;
use crate::provider::{Memory, SharedHandle, Span};
use crate::signal::pool::{self, PoolWindow};
use crate::store;
use crate::token::Token;
use crate::window::Window;
use crate::window_cache;
use locality::Reach;
use request::{Request, WindowOffer, PROTOCOL_VERSION};
use reuse::Own;

/// Wall time spent in each phase of one rendezvous, for `symmwin bench rendezvous`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PhaseTimes {
    /// Getting the shareable handle to our memory: for an allocation, waiting for the
    /// export started when it was made (zero when that has finished); for a pad pool,
    /// the export itself.
    pub export_us: f64,
    /// Publishing the request.
    pub publish_us: f64,
    /// Waiting for and validating every request.
    pub gather_us: f64,
    /// Reserving the span (and mapping and zeroing our own memory first where it must
    /// be zeroed before any peer can map it: pad pools).
    pub reserve_us: f64,
    /// Sending our handle to every peer and receiving theirs.
    pub exchange_us: f64,
    /// Importing peers' handles.
    pub import_us: f64,
    /// Mapping every slot not mapped yet and granting access (once per contiguous
    /// run of slots).
    pub map_us: f64,
    /// Pad pool work (slot choice; pool growth when needed).
    pub pads_us: f64,
    /// Every rank took the same released window over whole: no export, exchange,
    /// import or map.
    pub reused: bool,
}

/// What a finished exchange produced.
struct Exchanged {
    span: Box<dyn Span>,
    layout: FlatLayout,
    requests: Vec<Request>,
    /// The rendezvous number that made it.
    seq: u64,
    /// It is a released window taken over whole: no handles went between the ranks.
    reused: bool,
    /// Which ranks' memory is mapped in `span` (the others' slots stay unmapped).
    mapped: Vec<bool>,
    /// The window may go to the window cache when freed: every rank maps every
    /// rank over the socket (a group spanning hosts keeps no windows).
    cacheable: bool,
}

/// Pad information a request carries.
struct PadAsk {
    pad_size: usize,
    pools: usize,
    free: Vec<u64>,
}

impl Group {
    /// Make `alloc` a window of this group with the default signal-pad size.
    /// Collective: every rank calls it, in the same order as its other rendezvous.
    pub fn rendezvous(&self, alloc: &Allocation) -> Result<Window> {
        self.rendezvous_with_pads(alloc, crate::signal::DEFAULT_PAD_SIZE)
    }

    /// [`Group::rendezvous`] with `pad_size` bytes of signal pad per rank.
    pub fn rendezvous_with_pads(&self, alloc: &Allocation, pad_size: usize) -> Result<Window> {
        self.rendezvous_timed(alloc, pad_size).map(|(w, _)| w)
    }

    /// [`Group::rendezvous_with_pads`], also returning where the time went.
    pub fn rendezvous_timed(
        &self,
        alloc: &Allocation,
        pad_size: usize,
    ) -> Result<(Window, PhaseTimes)> {
        let result = self.rendezvous_inner(alloc, pad_size);
        result.map_err(|e| self.shared.context(e))
    }

    fn rendezvous_inner(
        &self,
        alloc: &Allocation,
        pad_size: usize,
    ) -> Result<(Window, PhaseTimes)> {
        let shared = &self.shared;
        let mut times = PhaseTimes::default();
        let mut state = self.lock_state()?;
        let bad_argument = if shared.provider.info() != alloc.provider().info() {
            Some(format!(
                "allocation lives on {:?}, group {} uses {:?}",
                alloc.provider().info(),
                shared.name,
                shared.provider.info()
            ))
        } else if pad_size % 4 != 0 {
            Some(format!("signal pad size {pad_size} is not a multiple of 4"))
        } else {
            None
        };
        if let Some(message) = bad_argument {
            // Peers still take part in this rendezvous number (and time out naming
            // us); skipping it here too keeps the later ones of the group in step.
            state.next_seq += 1;
            return Err(Error::invalid(message));
        }
        let provider = &shared.provider;
        let (pools, free) = shared.pads.snapshot(pad_size, shared.rank, |addr, len| {
            let mut bytes = vec![0u8; len];
            // SAFETY: `addr..addr + len` is this rank's own pad in a pool window the
            // group keeps mapped for as long as `shared.pads` lives.
            let read = unsafe { provider.read(addr, &mut bytes) };
            read.is_ok() && bytes.iter().all(|&b| b == 0)
        });
        let ask = PadAsk {
            pad_size,
            pools,
            free,
        };
        let exchanged = self.exchange(
            &mut state,
            Own::Alloc(alloc),
            alloc.size(),
            &ask,
            false,
            &mut times,
        )?;
        let start = Instant::now();
        let lease = if pad_size == 0 {
            None
        } else {
            Some(self.claim_pad(&mut state, &exchanged.requests, pad_size, &mut times)?)
        };
        times.pads_us += start.elapsed().as_secs_f64() * 1e6;
        let window = Window::new(
            std::sync::Arc::clone(&self.shared),
            exchanged.span,
            exchanged.layout,
            alloc.size(),
            lease,
            exchanged.mapped,
            exchanged.cacheable.then(|| (alloc.clone(), exchanged.seq)),
        );
        Ok((window, times))
    }

    /// Pick the lowest pad slot free on every rank, growing the pool when none is.
    fn claim_pad(
        &self,
        state: &mut GroupState,
        requests: &[Request],
        pad_size: usize,
        times: &mut PhaseTimes,
    ) -> Result<crate::signal::pool::PadLease> {
        let shared = &self.shared;
        let bitmaps: Vec<&[u64]> = requests.iter().map(|r| r.pad_free.as_slice()).collect();
        let slot = match pool::common_free_slot(&bitmaps) {
            Some(slot) => slot,
            None => {
                let pools = requests[0].pad_pools;
                let granularity = shared.provider.info().granularity;
                let bytes = pool::pool_bytes(pad_size, granularity)?;
                let memory = shared.provider.create(bytes)?;
                let ask = PadAsk {
                    pad_size: 0,
                    pools: 0,
                    free: Vec::new(),
                };
                let pool_window =
                    self.exchange(state, Own::Pool(memory.as_ref()), bytes, &ask, true, times)?;
                shared.pads.grow(
                    pad_size,
                    PoolWindow {
                        _span: pool_window.span,
                        layout: pool_window.layout,
                    },
                );
                pools * pool::slots_per_pool(bytes, pad_size)
            }
        };
        shared.pads.take(pad_size, slot).ok_or_else(|| {
            Error::new(
                Phase::Map,
                ErrorKind::Mismatch {
                    field: "pad_free",
                    detail: format!("slot {slot} agreed by all ranks is not free here"),
                },
            )
        })
    }

    /// The collective core: publish, gather, validate, exchange, map.
    fn exchange(
        &self,
        state: &mut GroupState,
        own: Own<'_>,
        size: usize,
        pads: &PadAsk,
        zero_own: bool,
        times: &mut PhaseTimes,
    ) -> Result<Exchanged> {
        let shared = &self.shared;
        let seq = state.next_seq;
        state.next_seq += 1;
        let offer = own.offer(&self.shared);
        let own_key = shared.namespace.request(seq, shared.rank);
        let mut watch = Stopwatch(Instant::now());
        // Export before publishing (for an allocation: the handle exported when it was
        // made): a rank that cannot export must not make peers wait for a handle that
        // will never come longer than the timeout, and a request carries the fabric
        // handle for peers of its fabric domain on other hosts. Memory that may take a
        // released window over needs no handle unless that fails: only groups whose
        // ranks all share one host keep windows, so then no peer reads it from the store.
        let handle = match offer.reuse {
            Some(_) => None,
            None => Some(own.export()?),
        };
        watch.lap(&mut times.export_us);
        let mut request = self.request(state, seq, own.memory(), size, pads, handle.as_ref());
        request.cache = offer;
        let deadline = Instant::now() + shared.timeout;
        // A stale store and two processes given one rank both show at a group's first
        // rendezvous (an earlier job's requests start at sequence 0; duplicates start
        // together), so later ones skip the lookup: 1 set + 1 wait_all + 1 delete.
        if seq == 0 {
            claim::check_own_key(shared, seq, &own_key, deadline)?;
        }
        let encoded = request.encode();
        publish(shared, &own_key, encoded.clone(), deadline)?;
        watch.lap(&mut times.publish_us);

        let mut gathered = false;
        let result = (|| {
            let (keys, requests) = gather_requests(shared, seq, encoded, deadline)?;
            gathered = true;
            let peers = peer_addresses(&requests, &keys)?;
            watch.lap(&mut times.gather_us);
            window_cache::release(&self.shared, &reuse::freed_everywhere(&requests));
            // Only windows of one-host groups are parked (`cacheable`), so a window
            // taken over maps every rank.
            if let Some(window) = own.take_over(&requests) {
                times.reused = true;
                return Ok(Exchanged {
                    span: window.span,
                    layout: window.layout,
                    mapped: vec![true; requests.len()],
                    requests,
                    seq,
                    reused: true,
                    cacheable: true,
                });
            }
            let handle = match handle {
                Some(handle) => handle,
                None => own.export()?,
            };
            let gathered = Gathered {
                seq,
                keys,
                requests,
                peers,
            };
            let ours = Ours {
                memory: own.memory(),
                handle,
                zero_own,
            };
            self.map_fresh(state, ours, gathered, times, watch)
        })();
        let done = KeysDone {
            earlier: gathered,
            own: result.as_ref().is_ok_and(|e| e.every_peer_sent()),
        };
        self.drop_keys(state, own_key, done);
        result.map_err(|e| claim::explain(shared, seq, e))
    }

    /// Our request for rendezvous `seq` of `memory` (`size` bytes asked for), with no
    /// window cache offer.
    fn request(
        &self,
        state: &GroupState,
        seq: u64,
        memory: &dyn Memory,
        size: usize,
        pads: &PadAsk,
        handle: Option<&SharedHandle>,
    ) -> Request {
        let shared = &self.shared;
        let info = shared.provider.info();
        Request {
            version: PROTOCOL_VERSION,
            group: shared.name.clone(),
            seq,
            rank: shared.rank,
            world: shared.world,
            provider: info.kind,
            handle_type: info.handle_type,
            device: info.device,
            size,
            alloc_size: memory.len(),
            pad_size: pads.pad_size,
            pad_pools: pads.pools,
            pad_free: pads.free.clone(),
            foreign_calls: shared
                .foreign_calls
                .load(std::sync::atomic::Ordering::Relaxed),
            pid: std::process::id(),
            uid: rustix::process::getuid().as_raw(),
            host: shared.host.clone(),
            locality: shared.locality.clone(),
            fabric_handle: handle.and_then(|h| spanning::store_handle(h, &shared.locality)),
            socket: state.endpoint.path().to_path_buf(),
            token: state.endpoint.token().to_hex(),
            cache: WindowOffer::default(),
        }
    }

    /// Make a window of fresh memory from the gathered requests: reserve the span,
    /// send `handle` to the peers that take it over the socket, take theirs (and
    /// fabric peers' from their requests), import and map.
    fn map_fresh(
        &self,
        state: &mut GroupState,
        ours: Ours<'_>,
        gathered: Gathered,
        times: &mut PhaseTimes,
        mut watch: Stopwatch,
    ) -> Result<Exchanged> {
        let shared = &self.shared;
        let info = shared.provider.info();
        let Ours {
            memory,
            handle,
            zero_own,
        } = ours;
        let Gathered {
            seq,
            keys,
            requests,
            peers,
        } = gathered;
        let stride = memory.len();
        let span_len = FlatLayout::span_len(stride, shared.world)?;
        // The whole span is reserved (the layout stays base + r * stride), but only
        // the slots of mapped ranks are mapped; the others cost no memory.
        let mut span = shared.provider.reserve(span_len)?;
        let layout = FlatLayout::new(span.base(), stride, shared.world)?;
        // Memory that must be zeroed here is zeroed before any peer gets its handle;
        // otherwise our slot is mapped with the peers', in one batch.
        let own_mapped = zero_own && !info.zero_on_create;
        if own_mapped {
            span.map(shared.rank * stride, memory)?;
            span.zero(shared.rank * stride, stride)?;
        }
        watch.lap(&mut times.reserve_us);

        // Our handle goes only to the peers that import it from the socket; peers
        // on other hosts get nothing (those of our fabric domain read the request).
        let reach = spanning::reach(&requests, shared.rank, info.handle_type)?;
        let targets: Vec<usize> = (0..shared.world)
            .filter(|&r| reach[r] == Reach::Socket)
            .collect();
        let round = Round {
            group: shared.id,
            seq,
            rank: shared.rank,
            peers: &peers,
            targets: &targets,
            size: stride as u64,
        };
        let mut handles = state.endpoint.all_gather(&round, &handle, shared.timeout)?;
        // Closing an exported CUDA fd is not free; count it here, not nowhere.
        drop(handle);
        for (peer, slot) in handles.iter_mut().enumerate() {
            if reach[peer] == Reach::Store {
                *slot = Some(spanning::handle_from_store(&requests[peer], &keys[peer])?);
            }
        }
        watch.lap(&mut times.exchange_us);

        let imported = import::import_all(shared.provider.as_ref(), handles, stride)?;
        watch.lap(&mut times.import_us);
        map_slots(
            span.as_mut(),
            &layout,
            (shared.rank, memory, own_mapped),
            &imported,
        )?;
        watch.lap(&mut times.map_us);
        Ok(Exchanged {
            span,
            layout,
            cacheable: spanning::one_host(&requests),
            requests,
            seq,
            reused: false,
            mapped: reach.iter().map(|r| r.is_mapped()).collect(),
        })
    }
}

/// Which of our request keys no peer needs any more after a rendezvous.
struct KeysDone {
    /// Every rank published this rendezvous's request, so every rank is past the
    /// earlier ones (rendezvous of a group are ordered): our earlier keys can go.
    earlier: bool,
    /// Every peer sent us its handle, which it does only after reading all requests:
    /// this rendezvous's key can go too. Otherwise (a failure, a window taken over
    /// without handles, peers on other hosts that send nothing or read our fabric
    /// handle from the request) it goes once every rank has published its next one.
    own: bool,
}

impl Exchanged {
    /// True when a handle came over the socket from every peer.
    fn every_peer_sent(&self) -> bool {
        !self.reused && self.cacheable
    }
}

impl Group {
    /// Delete the request keys `done` says no peer needs any more.
    fn drop_keys(&self, state: &mut GroupState, own_key: String, done: KeysDone) {
        let mut doomed: Vec<String> = if done.earlier {
            state.stale_keys.drain(..).collect()
        } else {
            Vec::new()
        };
        if done.own {
            doomed.push(own_key);
        } else {
            state.stale_keys.push(own_key);
        }
        if doomed.is_empty() {
            return;
        }
        let rank = self.shared.rank;
        let deleted = store::deadline::call(
            &self.shared.store,
            Instant::now() + self.shared.timeout,
            Phase::Teardown,
            || "deleting our request keys".into(),
            move |s| {
                for key in &doomed {
                    if let Err(e) = s.delete(key) {
                        tracing::warn!("symmwin rank {rank}: could not delete {key}: {e}");
                    }
                }
                Ok(())
            },
        );
        if let Err(e) = deleted {
            tracing::warn!("symmwin rank {rank}: {e}");
        }
    }
}

/// Map every slot of the span not mapped yet, in one batch: ours (unless `own.2` says
/// it already is) and each imported peer's. Errors name the peer whose slot failed.
fn map_slots(
    span: &mut dyn Span,
    layout: &FlatLayout,
    own: (usize, &dyn Memory, bool),
    imported: &[(usize, Box<dyn Memory>)],
) -> Result<()> {
    let (rank, memory, already_mapped) = own;
    let mut slots: Vec<(usize, usize, &dyn Memory)> = Vec::with_capacity(imported.len() + 1);
    if !already_mapped {
        slots.push((rank, layout.slot(rank)? - layout.base, memory));
    }
    for (peer, memory) in imported {
        slots.push((*peer, layout.slot(*peer)? - layout.base, memory.as_ref()));
    }
    let items: Vec<(usize, &dyn Memory)> = slots.iter().map(|&(_, o, m)| (o, m)).collect();
    span.map_all(&items).map_err(|(i, e)| {
        let owner = slots[i].0;
        if owner == rank {
            e
        } else {
            e.with_peer(owner)
        }
    })
}

/// Wait for every rank's request of rendezvous `seq` (ours is `encoded`), decode and
/// validate them: the keys and the requests, in rank order.
fn gather_requests(
    shared: &GroupShared,
    seq: u64,
    encoded: Vec<u8>,
    deadline: Instant,
) -> Result<(Vec<String>, Vec<Request>)> {
    let keys: Vec<String> = (0..shared.world)
        .map(|r| shared.namespace.request(seq, r))
        .collect();
    let values = store::gather_by(
        &shared.store,
        keys.clone(),
        (shared.rank, encoded),
        deadline,
    )?;
    let requests = values
        .iter()
        .enumerate()
        .map(|(r, v)| Request::decode(&keys[r], r, v))
        .collect::<Result<Vec<_>>>()?;
    request::validate(&requests)?;
    Ok((keys, requests))
}

/// Every rank's exchange address from its request (`keys` name them in errors).
fn peer_addresses(requests: &[Request], keys: &[String]) -> Result<Vec<PeerAddress>> {
    requests
        .iter()
        .map(|r| {
            let token = Token::from_hex(&r.token).ok_or_else(|| {
                Error::new(
                    Phase::Gather,
                    ErrorKind::Corrupt {
                        key: keys[r.rank].clone(),
                        detail: "token is not 32 hex digits".into(),
                    },
                )
                .with_peer(r.rank)
            })?;
            Ok(PeerAddress {
                socket: r.socket.clone(),
                pid: r.pid,
                token,
            })
        })
        .collect()
}

/// What the gather of rendezvous `seq` produced: every rank's key, request and
/// exchange address, in rank order.
struct Gathered {
    seq: u64,
    keys: Vec<String>,
    requests: Vec<Request>,
    peers: Vec<PeerAddress>,
}

/// Our side of a fresh window: our memory, its handle, and whether our slot must be
/// zeroed before any peer can map it.
struct Ours<'a> {
    memory: &'a dyn Memory,
    handle: SharedHandle,
    zero_own: bool,
}

/// Wall time by phase: each lap adds the time since the last one to a phase.
struct Stopwatch(Instant);

impl Stopwatch {
    fn lap(&mut self, slot: &mut f64) {
        let now = Instant::now();
        *slot += (now - self.0).as_secs_f64() * 1e6;
        self.0 = now;
    }
}

/// Publish our request (`encoded`) under `key`, by `deadline`.
fn publish(shared: &GroupShared, key: &str, encoded: Vec<u8>, deadline: Instant) -> Result<()> {
    let owned = key.to_owned();
    store::deadline::call(
        &shared.store,
        deadline,
        Phase::Publish,
        || format!("set({key})"),
        move |s| s.set(&owned, &encoded),
    )
    .map_err(|e| e.during(Phase::Publish))
}
