//! Publishing our request and gathering everyone's: the steps before any handle
//! moves, which decide whether the ranks agree.

use std::time::Instant;

use super::request::{self, Request};
use super::spanning;
use crate::exchange::PeerAddress;
use crate::group::{GroupShared, GroupState};
use crate::protocol::PROTOCOL_VERSION;
use crate::store;
use crate::token::Token;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{Memory, SharedHandle};

/// What our request for one rendezvous describes.
pub(super) struct Ask<'a> {
    pub(super) seq: u64,
    pub(super) memory: &'a dyn Memory,
    /// Bytes asked for.
    pub(super) size: usize,
    pub(super) pads: &'a PadAsk,
    /// Our handle when exported ahead (a request carries fabric handles).
    pub(super) handle: Option<&'a SharedHandle>,
}

/// Our request for `ask`.
pub(super) fn request(shared: &GroupShared, state: &GroupState, ask: Ask<'_>) -> Request {
    let info = shared.provider.info();
    Request {
        version: PROTOCOL_VERSION.into(),
        group: shared.name.clone(),
        seq: ask.seq,
        rank: shared.rank,
        world: shared.world,
        provider: info.kind,
        handle_type: info.handle_type,
        device: info.device,
        size: ask.size,
        alloc_size: ask.memory.len(),
        pad_size: ask.pads.pad_size,
        pad_pools: ask.pads.pools,
        pad_free: ask.pads.free.clone(),
        pad_scrub: ask.pads.scrub.clone(),
        foreign_calls: shared
            .foreign_calls
            .load(std::sync::atomic::Ordering::Relaxed),
        pid: std::process::id(),
        start_time: crate::process_start::own_start_time(),
        written_at_ms: crate::process_start::now_ms(),
        remote_transport: shared.remote_peers().is_some(),
        uid: rustix::process::getuid().as_raw(),
        host: shared.host.clone(),
        locality: shared.locality.clone(),
        fabric_handle: ask
            .handle
            .and_then(|h| spanning::store_handle(h, &shared.locality)),
        socket: state.endpoint.path().to_path_buf(),
        token: state.endpoint.token().to_hex(),
    }
}

/// Publish our request (`encoded`) under `key`, by `deadline`.
pub(super) fn publish(
    shared: &GroupShared,
    key: &str,
    encoded: Vec<u8>,
    deadline: Instant,
) -> Result<()> {
    set(shared, key, encoded, deadline).map_err(|e| e.during(Phase::Publish))
}

/// Set `key` to `value` in the group's store by `deadline`; a failure of the store's
/// own call keeps the phase the store gave it.
pub(super) fn set(
    shared: &GroupShared,
    key: &str,
    value: Vec<u8>,
    deadline: Instant,
) -> Result<()> {
    let owned = key.to_owned();
    store::deadline::call(
        &shared.store,
        deadline,
        Phase::Publish,
        || format!("set({key})"),
        move |s| s.set(&owned, &value),
    )
}

/// Wait for every rank's request of rendezvous `seq` (ours is `encoded`) until the
/// deadline, asking `looks` meanwhile (its error ends the wait); decode and validate
/// them: the keys and the requests, in rank order.
pub(super) fn gather_requests(
    shared: &GroupShared,
    seq: u64,
    encoded: Vec<u8>,
    (deadline, looks): (Instant, &mut impl store::GatherLooks),
) -> Result<(Vec<String>, Vec<Request>)> {
    let keys: Vec<String> = (0..shared.world)
        .map(|r| shared.namespace.request(seq, r))
        .collect();
    let own = (shared.rank, encoded);
    let values = store::gather_by(&shared.store, keys.clone(), own, deadline, looks)?;
    let requests = values
        .iter()
        .enumerate()
        .map(|(r, v)| Request::decode(&keys[r], r, v))
        .collect::<Result<Vec<_>>>()?;
    request::validate(&requests)?;
    Ok((keys, requests))
}

/// Every rank's exchange address from its request (`keys` name them in errors).
pub(super) fn peer_addresses(requests: &[Request], keys: &[String]) -> Result<Vec<PeerAddress>> {
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

/// Pad information a request carries.
pub(super) struct PadAsk {
    pub(super) pad_size: usize,
    pub(super) pools: usize,
    pub(super) free: Vec<u64>,
    pub(super) scrub: Vec<u64>,
}

impl PadAsk {
    /// No pads: the request of a pad pool's own window.
    pub(super) fn none() -> Self {
        PadAsk {
            pad_size: 0,
            pools: 0,
            free: Vec::new(),
            scrub: Vec::new(),
        }
    }

    /// This rank's pools of `pad_size` pads and which slots are free in them.
    pub(super) fn of(shared: &GroupShared, pad_size: usize) -> Self {
        let provider = &shared.provider;
        let snapshot = shared.pads.snapshot(pad_size, shared.rank, |addr, len| {
            let mut bytes = vec![0u8; len];
            // SAFETY: `addr..addr + len` is this rank's own pad in a pool window the
            // group keeps mapped for as long as `shared.pads` lives.
            let read = unsafe { provider.read(addr, &mut bytes) };
            read.is_ok() && bytes.iter().all(|&b| b == 0)
        });
        PadAsk {
            pad_size,
            pools: snapshot.pools,
            free: snapshot.free,
            scrub: snapshot.scrub,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::allocation::Allocation;
    use crate::group::Group;
    use crate::rendezvous::test_group;

    /// Publish `group`'s request for rendezvous 0 of `alloc` with `size` bytes asked.
    fn publish_one(group: &Group, alloc: &Allocation, size: usize) -> Vec<u8> {
        let shared = &group.shared;
        let state = group.lock_state().unwrap();
        let pads = PadAsk::none();
        let ask = Ask {
            seq: 0,
            memory: alloc.memory(),
            size,
            pads: &pads,
            handle: None,
        };
        let encoded = request(shared, &state, ask).encode();
        let key = shared.namespace.request(0, shared.rank);
        let deadline = Instant::now() + Duration::from_secs(5);
        publish(shared, &key, encoded.clone(), deadline).unwrap();
        encoded
    }

    /// What a gather returns: every rank's key and request.
    type KeysAndRequests = (Vec<String>, Vec<Request>);

    /// Ranks 0 and 1 of group `name` publish rendezvous 0 (rank 0 asking for 100
    /// bytes, rank 1 for `size_one`); rank 0 gathers.
    fn gather_two(name: &str, size_one: usize) -> (Group, Result<KeysAndRequests>) {
        let (zero, store) = test_group(name, 0, 2, None);
        let (one, _) = test_group(name, 1, 2, Some(store));
        let alloc = Allocation::new(zero.provider().clone(), 100).unwrap();
        let ours = publish_one(&zero, &alloc, 100);
        publish_one(&one, &alloc, size_one);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut looks = crate::rendezvous::join::Joins::new(&zero.shared, 0, 0);
        let gathered = gather_requests(&zero.shared, 0, ours, (deadline, &mut looks));
        drop(looks);
        (one, gathered)
    }

    #[test]
    fn gathered_requests_come_in_rank_order_with_their_addresses() {
        let (one, gathered) = gather_two("gather", 100);
        let (keys, requests) = gathered.unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(requests[0].rank, 0);
        assert_eq!(requests[1].rank, 1);
        let peers = peer_addresses(&requests, &keys).unwrap();
        let state = one.lock_state().unwrap();
        assert_eq!(peers[1].socket, state.endpoint.path());
        assert!(peers[1].token.matches(&state.endpoint.token().bytes()));
    }

    #[test]
    fn a_rank_that_disagrees_fails_the_gather_naming_the_field() {
        let (_, gathered) = gather_two("disagree", 200);
        let err = gathered.unwrap_err();
        assert_eq!(err.phase(), Phase::Gather);
        let text = err.to_string();
        assert!(text.contains("size"), "{text}");
        assert!(text.contains("200 on rank(s) [1]"), "{text}");
    }

    #[test]
    fn a_forged_token_is_named_with_its_key_and_rank() {
        let (_, gathered) = gather_two("token", 100);
        let (keys, mut requests) = gathered.unwrap();
        requests[1].token = "not hex".into();
        let err = peer_addresses(&requests, &keys).unwrap_err();
        assert_eq!(err.peer(), Some(1));
        assert!(err.to_string().contains(&keys[1]), "{err}");
    }
}
