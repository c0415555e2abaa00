//! Rendezvous without the store: once a group's ranks all share one host and know each
//! other's sockets (from the group's first rendezvous, which goes through the store),
//! each rank's request travels in its first datagram to each peer, with its word on
//! freed windows and, for fresh memory, its handle. A re-allocation that takes a freed
//! window over then costs one datagram per peer and no store operation; fresh memory
//! one datagram per peer too.
//!
//! The messages are authenticated as handles always were (our uid, the pid and token
//! the peer published in the group's first rendezvous), so a request that arrives here
//! is at least as trustworthy as one read from the store. Every rank validates the
//! same set of requests, so a disagreement is the same error on every rank, as with
//! the store; a rank that never sends is a timeout naming it, in the gather phase.

use super::clock::Step;
use super::map::{Plan, Trading};
use super::publish::{self, Ask, PadAsk};
use super::request::{self, Request};
use super::reuse::Own;
use super::run::{Exchanged, Gathered, Rendezvous};
use crate::exchange::wire::MAX_REQUEST;
use crate::exchange::{Awaited, Outgoing, PeerAddress, Traded};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

impl Rendezvous<'_> {
    /// Rendezvous `seq` of memory `own` (`size` bytes asked for) with `peers`, the
    /// group's addresses, through the sockets alone.
    pub(super) fn exchange_direct(
        &mut self,
        own: &Own<'_>,
        size: usize,
        pads: &PadAsk,
        peers: Vec<PeerAddress>,
    ) -> Result<Exchanged> {
        let shared = self.shared;
        let seq = self.state.next_seq;
        self.state.next_seq += 1;
        let offer = own.offer(shared);
        self.clock.restart();
        let reserved = self.reserve_early(own, &offer)?;
        // Our handle goes with our request, unless our memory may take a window over.
        let handle = match offer.reuse {
            Some(_) => None,
            None => Some(own.export()?),
        };
        self.clock.lap(Step::Export);
        let ask = Ask {
            seq,
            memory: own.memory(),
            size,
            pads,
            handle: None,
        };
        let ours = publish::request(shared, self.state, ask);
        self.clock.lap(Step::Publish);
        let mut trading = Trading {
            offer,
            reserved,
            handle,
            traded: Traded::new(shared.world),
            offers_in: matches!(own, Own::Alloc(_)),
        };
        let gathered = Gathered {
            seq,
            keys: (0..shared.world).map(message_label).collect(),
            requests: Vec::new(),
            peers,
        };
        let requests = self.trade_requests(own, ours, &mut trading, &gathered)?;
        let plan = Plan::of(&requests, shared.rank, shared.provider.info().handle_type)?;
        if !plan.cacheable {
            return Err(Error::new(
                Phase::Gather,
                ErrorKind::Mismatch {
                    field: "locality",
                    detail: "a rank no longer shares this host and socket directory".into(),
                },
            ));
        }
        self.clock.lap(Step::Gather);
        let gathered = Gathered {
            requests,
            ..gathered
        };
        self.finish(own, trading, gathered, plan)
    }

    /// Send our request `ours` (with our offer and handle) to every peer and take
    /// theirs: every rank's request, validated. Waiting too long for a peer's is a
    /// timeout of the gather, as with the store.
    fn trade_requests(
        &mut self,
        own: &Own<'_>,
        ours: Request,
        trading: &mut Trading,
        gathered: &Gathered,
    ) -> Result<Vec<Request>> {
        let shared = self.shared;
        let encoded = ours.encode();
        if encoded.len() > MAX_REQUEST {
            return Err(Error::invalid(format!(
                "our request is {} bytes, more than a message carries ({MAX_REQUEST})",
                encoded.len()
            )));
        }
        let targets: Vec<usize> = (0..shared.world).filter(|&r| r != shared.rank).collect();
        let round = self.round(gathered, &targets, own);
        let out = Outgoing {
            offer: trading.offer,
            handle: trading.handle.as_ref(),
            request: Some(&encoded),
        };
        self.trade(&round, &mut trading.traded, &out, Awaited::Requests)
            .map_err(|e| match e.kind() {
                ErrorKind::Timeout { .. } | ErrorKind::PeerExited { .. } => e.during(Phase::Gather),
                _ => e,
            })?;
        received_requests(ours, &mut trading.traded, shared.rank)
    }
}

/// What names a peer's request in an error: the message it came in.
fn message_label(rank: usize) -> String {
    format!("the request in rank {rank}'s message")
}

/// Every rank's request in rank order (`ours` at `rank`), decoded and validated.
fn received_requests(ours: Request, traded: &mut Traded, rank: usize) -> Result<Vec<Request>> {
    let mut ours = Some(ours);
    let requests = (0..traded.requests.len())
        .map(|r| match (r == rank, traded.requests[r].take()) {
            (true, _) => ours
                .take()
                .ok_or_else(|| Error::invalid("our own request was taken twice")),
            (false, Some(bytes)) => Request::decode(&message_label(r), r, &bytes),
            (false, None) => Err(Error::new(
                Phase::Gather,
                ErrorKind::Corrupt {
                    key: message_label(r),
                    detail: "no request came".into(),
                },
            )
            .with_peer(r)),
        })
        .collect::<Result<Vec<_>>>()?;
    request::validate(&requests)?;
    traded.check_fit()?;
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::allocation::Allocation;
    use crate::group::{Group, GroupSpec};
    use crate::store::MemoryStore;
    use symmwin_device::error::{ErrorKind, Phase};
    use symmwin_host::HostProvider;

    /// Both ranks of a world-2 group on one memory store, with a short timeout.
    fn pair(name: &str) -> (Arc<MemoryStore>, [Group; 2]) {
        let store = Arc::new(MemoryStore::new());
        let mut config = crate::config::Config::from_env().unwrap();
        config.timeout = Duration::from_millis(300);
        let group = |rank| {
            let provider = Arc::new(HostProvider::new());
            let spec = GroupSpec::new(name, rank, 2);
            Group::new(spec, store.clone(), provider, &config).unwrap()
        };
        (store.clone(), [group(0), group(1)])
    }

    /// Both ranks rendezvous `sizes[rank]` bytes at once: each rank's result.
    fn both(
        groups: &[Group; 2],
        sizes: [usize; 2],
    ) -> Vec<symmwin_device::error::Result<crate::window::Window>> {
        std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|r| {
                    let group = &groups[r];
                    s.spawn(move || {
                        let alloc = Allocation::new(group.provider().clone(), sizes[r])?;
                        group.rendezvous(&alloc)
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn after_the_first_rendezvous_the_store_is_left_alone_and_errors_stay_clear() {
        let (store, groups) = pair("direct");
        assert!(both(&groups, [4096, 4096]).iter().all(|r| r.is_ok()));
        let ops = groups[0].store_ops();
        // Requests over the sockets: a window whose peer maps it, and no store call.
        let windows = both(&groups, [8192, 8192]);
        let window = windows[0].as_ref().unwrap();
        window.write(1, 5, &[7]).unwrap();
        let mut byte = [0u8];
        windows[1].as_ref().unwrap().read(1, 5, &mut byte).unwrap();
        assert_eq!(byte[0], 7);
        assert_eq!(groups[0].store_ops(), ops);
        assert!(store.is_empty(), "no request key is left in the store");
        // Ranks that disagree fail alike, naming the field.
        for result in both(&groups, [4096, 8192]) {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("ranks disagree on size"), "{err}");
        }
        // A rank that does not come is named by a timeout of the gather.
        let started = Instant::now();
        let alloc = Allocation::new(groups[0].provider().clone(), 4096).unwrap();
        let err = groups[0].rendezvous(&alloc).unwrap_err();
        assert_eq!(err.phase(), Phase::Gather, "{err}");
        assert!(matches!(err.kind(), ErrorKind::Timeout { missing, .. } if missing == &[1]));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
