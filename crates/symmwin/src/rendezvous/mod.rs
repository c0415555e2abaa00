//! Rendezvous: publish a request, check that every rank agrees, exchange handles,
//! import, and map every rank's memory into one flat span.

pub mod locality;
pub mod request;

use std::time::Instant;

use crate::allocation::Allocation;
use crate::error::{Error, ErrorKind, Phase, Result};
use crate::exchange::{PeerAddress, Round};
use crate::group::{Group, GroupState};
use crate::layout::FlatLayout;
use crate::provider::{HandleType, Memory, SharedHandle, Span};
use crate::signal::pool::{self, PoolWindow};
use crate::store;
use crate::token::Token;
use crate::window::Window;
use locality::Reach;
use request::{Request, PROTOCOL_VERSION};

/// Wall time spent in each phase of one rendezvous, for `symmwin bench rendezvous`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PhaseTimes {
    /// Exporting a shareable handle to our memory.
    pub export_us: f64,
    /// Publishing the request.
    pub publish_us: f64,
    /// Waiting for and validating every request.
    pub gather_us: f64,
    /// Reserving the span and mapping our own memory.
    pub reserve_us: f64,
    /// Exporting, sending and receiving handles.
    pub exchange_us: f64,
    /// Importing and mapping peers' memory.
    pub import_map_us: f64,
    /// Pad pool work (slot choice; pool growth when needed).
    pub pads_us: f64,
}

/// What a finished exchange produced.
struct Exchanged {
    span: Box<dyn Span>,
    layout: FlatLayout,
    requests: Vec<Request>,
    /// Which ranks' memory is mapped in `span` (the others' slots stay unmapped).
    mapped: Vec<bool>,
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
        let rank = self.shared.rank;
        let result = self.rendezvous_inner(alloc, pad_size);
        result.map_err(|e| e.at_rank(rank))
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
        let (pools, free) = shared.pads.snapshot(pad_size);
        let ask = PadAsk {
            pad_size,
            pools,
            free,
        };
        let exchanged = self.exchange(
            &mut state,
            alloc.memory(),
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
                    self.exchange(state, memory.as_ref(), bytes, &ask, true, times)?;
                shared.pads.grow(
                    pad_size,
                    PoolWindow {
                        span: pool_window.span,
                        layout: pool_window.layout,
                    },
                );
                pools * pool::slots_per_pool(bytes, pad_size)
            }
        };
        shared
            .pads
            .take(pad_size, slot, shared.rank)
            .ok_or_else(|| {
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
        memory: &dyn Memory,
        size: usize,
        pads: &PadAsk,
        zero_own: bool,
        times: &mut PhaseTimes,
    ) -> Result<Exchanged> {
        let shared = &self.shared;
        let seq = state.next_seq;
        state.next_seq += 1;
        let info = shared.provider.info();
        let own_key = shared.namespace.request(seq, shared.rank);
        let mut clock = Instant::now();
        let mut lap = |slot: &mut f64| {
            let now = Instant::now();
            *slot += (now - clock).as_secs_f64() * 1e6;
            clock = now;
        };
        // Export before publishing: a rank that cannot export must not make peers wait
        // for a handle that will never come longer than the timeout.
        let handle = memory.export()?;
        lap(&mut times.export_us);
        let request = Request {
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
            pid: std::process::id(),
            uid: rustix::process::getuid().as_raw(),
            host: shared.host.clone(),
            locality: shared.locality.clone(),
            fabric_handle: store_handle(&handle, &shared.locality),
            socket: state.endpoint.path().to_path_buf(),
            token: state.endpoint.token().to_hex(),
        };
        shared
            .store
            .set(&own_key, &request.encode())
            .map_err(|e| Error {
                phase: Phase::Publish,
                ..e
            })?;
        lap(&mut times.publish_us);

        let result = (|| {
            let keys: Vec<String> = (0..shared.world)
                .map(|r| shared.namespace.request(seq, r))
                .collect();
            let values = store::gather(shared.store.as_ref(), &keys, shared.timeout)?;
            let requests = values
                .iter()
                .enumerate()
                .map(|(r, v)| Request::decode(&keys[r], r, v))
                .collect::<Result<Vec<_>>>()?;
            request::validate(&requests)?;
            // Every rank has published this request, so it is done with earlier ones.
            delete_keys(shared, std::mem::take(&mut state.stale_keys));
            let peers = requests
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
                .collect::<Result<Vec<_>>>()?;
            lap(&mut times.gather_us);

            let stride = memory.len();
            let span_len = FlatLayout::span_len(stride, shared.world)?;
            // The whole span is reserved (the layout stays base + r * stride), but only
            // the slots of mapped ranks are mapped; the others cost no memory.
            let mut span = shared.provider.reserve(span_len)?;
            let layout = FlatLayout::new(span.base(), stride, shared.world)?;
            span.map(shared.rank * stride, memory)?;
            if zero_own && !info.zero_on_create {
                span.zero(shared.rank * stride, stride)?;
            }
            lap(&mut times.reserve_us);

            let reach = reach(&requests, shared.rank, info.handle_type)?;
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
                    *slot = Some(handle_from_store(&requests[peer], &keys[peer])?);
                }
            }
            lap(&mut times.exchange_us);

            for (peer, handle) in handles.into_iter().enumerate() {
                let Some(handle) = handle else { continue };
                let imported = shared
                    .provider
                    .import(handle, stride)
                    .map_err(|e| e.with_peer(peer))?;
                span.map(peer * stride, imported.as_ref())
                    .map_err(|e| e.with_peer(peer))?;
            }
            lap(&mut times.import_map_us);
            Ok(Exchanged {
                span,
                layout,
                requests,
                mapped: reach.iter().map(|r| r.is_mapped()).collect(),
            })
        })();
        // Every peer read our request before it sent us its handle, so after a success
        // the key (and those of earlier failures, which every peer has moved past) can go.
        // A peer on another host sends no handle and may still be reading it; it has
        // read it once it publishes its next request, so then the key goes (above).
        state.stale_keys.push(own_key);
        if result.as_ref().is_ok_and(|e| e.mapped.iter().all(|&m| m)) {
            delete_keys(shared, std::mem::take(&mut state.stale_keys));
        }
        result
    }
}

fn delete_keys(shared: &crate::group::GroupShared, keys: Vec<String>) {
    for key in keys {
        if let Err(e) = shared.store.delete(&key) {
            tracing::warn!("symmwin rank {}: could not delete {key}: {e}", shared.rank);
        }
    }
}

/// How every rank's memory reaches us: the published partition, confirmed by probing
/// the socket of every peer it says we share a kernel and socket directory with.
fn reach(requests: &[Request], me: usize, handle_type: HandleType) -> Result<Vec<Reach>> {
    let localities: Vec<&locality::Locality> = requests.iter().map(|r| &r.locality).collect();
    let reach = locality::decide(&localities, me, handle_type);
    for (peer, how) in reach.iter().enumerate() {
        if *how == Reach::Socket {
            locality::probe_socket(
                peer,
                &requests[peer].socket,
                requests[peer].locality.socket_dir,
            )?;
        }
    }
    Ok(reach)
}

/// The fabric handle to publish: only fabric handles of a device in a fabric domain,
/// for peers of that domain on other hosts (an fd means nothing off this kernel).
fn store_handle(handle: &SharedHandle, here: &locality::Locality) -> Option<String> {
    match handle {
        SharedHandle::Fabric(bytes) if here.fabric_domain.is_some() => {
            Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
        }
        _ => None,
    }
}

/// A peer's fabric handle from its request.
fn handle_from_store(request: &Request, key: &str) -> Result<SharedHandle> {
    let corrupt = |detail: &str| {
        Error::new(
            Phase::Gather,
            ErrorKind::Corrupt {
                key: key.to_owned(),
                detail: detail.to_owned(),
            },
        )
        .with_peer(request.rank)
    };
    let hex = request
        .fabric_handle
        .as_deref()
        .ok_or_else(|| corrupt("a peer of our fabric domain published no fabric handle"))?;
    if hex.len() != 128 || !hex.is_ascii() {
        return Err(corrupt("fabric handle is not 128 hex digits"));
    }
    let mut bytes = [0u8; 64];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| corrupt("fabric handle is not 128 hex digits"))?;
    }
    Ok(SharedHandle::Fabric(bytes))
}
