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
use super::pads::PadAsk;
use super::publish::{self, Ask};
use super::request::{self, Request};
use super::reuse::Own;
use super::run::{Exchanged, Gathered, Rendezvous};
use crate::error::{Error, ErrorKind, Phase, Result};
use crate::exchange::{Awaited, Outgoing, PeerAddress, Traded};

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
        let encoded = ours.encode();
        let mut trading = Trading {
            offer,
            reserved: self.reserve_early(own, &offer)?,
            handle,
            traded: Traded::new(shared.world),
            offers_in: true,
        };
        self.clock.lap(Step::Publish);
        let gathered = Gathered {
            seq,
            keys: (0..shared.world).map(message_label).collect(),
            requests: Vec::new(),
            peers,
        };
        let targets: Vec<usize> = (0..shared.world).filter(|&r| r != shared.rank).collect();
        let round = self.round(&gathered, &targets, own);
        let out = Outgoing {
            offer,
            handle: trading.handle.as_ref(),
            request: Some(&encoded),
        };
        self.trade(&round, &mut trading.traded, &out, Awaited::Requests)
            .map_err(|e| match e.kind() {
                ErrorKind::Timeout { .. } => e.during(Phase::Gather),
                _ => e,
            })?;
        let requests = received_requests(ours, &mut trading.traded, shared.rank)?;
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
        trading.offers_in = matches!(own, Own::Alloc(_));
        self.finish(own, trading, gathered, plan)
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
