//! One rendezvous run: the context its steps share (the group, its locked state and
//! the phase clock) and the orchestrator that runs the steps in order.

use std::sync::Arc;
use std::time::Instant;

use super::claim;
use super::clock::{PhaseClock, Step};
use super::give_up;
use super::join;
use super::publish::{self, Ask, PadAsk};
use super::request::Request;
use super::retire::{self, KeysDone};
use super::reuse::Own;
use crate::exchange::{Endpoint, Offer, PeerAddress};
use crate::group::{GroupShared, GroupState};
use crate::store;
use symmwin_device::error::Result;
use symmwin_device::layout::FlatLayout;
use symmwin_device::provider::{SharedHandle, Span};

/// A rendezvous in progress: what every step reads and the clock each one marks.
pub(super) struct Rendezvous<'a> {
    pub(super) shared: &'a Arc<GroupShared>,
    pub(super) state: &'a mut GroupState,
    pub(super) clock: PhaseClock,
    /// When the call began (milliseconds since the epoch): a peer's key written
    /// since, by a process gone now, is a rank that died in the call, not a stale one.
    pub(super) call_started_ms: u64,
}

/// What a finished exchange produced.
pub(super) struct Exchanged {
    pub(super) span: Box<dyn Span>,
    pub(super) layout: FlatLayout,
    pub(super) requests: Vec<Request>,
    /// The rendezvous number that made it.
    pub(super) seq: u64,
    /// Which ranks' memory is mapped in `span` (the others' slots stay unmapped).
    pub(super) mapped: Vec<bool>,
    /// The window may go to the window cache when freed: every rank maps every
    /// rank over the socket (a group spanning hosts keeps no windows). Every peer
    /// then sent us a message, which it does only after reading every request.
    pub(super) cacheable: bool,
}

/// What the gather of rendezvous `seq` produced: every rank's key, request and
/// exchange address, in rank order.
pub(super) struct Gathered {
    pub(super) seq: u64,
    pub(super) keys: Vec<String>,
    pub(super) requests: Vec<Request>,
    pub(super) peers: Vec<PeerAddress>,
}

impl<'a> Rendezvous<'a> {
    pub(super) fn new(shared: &'a Arc<GroupShared>, state: &'a mut GroupState) -> Self {
        Rendezvous {
            shared,
            state,
            clock: PhaseClock::start(),
            call_started_ms: crate::process_start::now_ms(),
        }
    }

    /// The collective core: publish, gather and validate, make the window (taken
    /// over, or mapped fresh), retire the keys no peer needs any more. Once the ranks
    /// know each other's sockets, the requests travel there instead (`direct`).
    pub(super) fn exchange(
        &mut self,
        own: Own<'_>,
        size: usize,
        pads: &PadAsk,
    ) -> Result<Exchanged> {
        if let Some(peers) = self.state.direct.clone() {
            let result = self.exchange_direct(&own, size, pads, peers);
            let done = KeysDone {
                earlier: result.is_ok(),
                own: false,
            };
            retire::retire_keys(self.shared, &mut self.state.stale_keys, None, done);
            return result;
        }
        let seq = self.state.next_seq;
        self.state.next_seq += 1;
        if seq == 0 {
            // Before anything else of the group's first rendezvous, so that a peer can
            // name us if we leave before publishing our request. It goes with our
            // earlier keys, once every rank's request of this call is in.
            let deadline = Instant::now() + self.shared.timeout;
            let key = join::publish(self.shared, deadline)?;
            self.state.stale_keys.push(key);
        }
        let offer = own.offer(self.shared);
        let own_key = self.shared.namespace.request(seq, self.shared.rank);
        self.clock.restart();
        let handle = self.export_ahead(&own, &offer)?;
        let ask = Ask {
            seq,
            memory: own.memory(),
            size,
            pads,
            handle: handle.as_ref(),
        };
        let (encoded, deadline) = self.publish(ask, &own_key)?;
        let mut gathered = false;
        let requests = {
            let mut looks = GatherLooks {
                heard: heard_give_up(self.shared, &mut self.state.endpoint, seq),
                joins: join::Joins::new(self.shared, seq, self.call_started_ms),
            };
            publish::gather_requests(self.shared, seq, encoded, (deadline, &mut looks))
        };
        let result = requests.and_then(|(keys, requests)| {
            gathered = true;
            let ours = (offer, handle);
            self.make_window(&own, ours, seq, keys, requests)
        });
        // A rank that gives up takes back all it wrote (peers that still need it fail
        // that call anyway: see `give_up`), so no key outlives a call it gave up. A
        // disagreement is no giving up: slower peers read our request to refuse alike.
        let gave_up = result.as_ref().is_err_and(|e| !give_up::settled_alike(e));
        let done = KeysDone {
            earlier: gathered || gave_up,
            own: result.as_ref().is_ok_and(|e| e.cacheable) || gave_up,
        };
        retire::retire_keys(self.shared, &mut self.state.stale_keys, Some(own_key), done);
        let call_started_ms = self.call_started_ms;
        result.map_err(|e| match self.peer_gave_up(seq, &e) {
            Some(notice) => notice,
            None => claim::explain(self.shared, seq, e, call_started_ms),
        })
    }

    /// A gather through the store that timed out may have waited for a peer that gave
    /// the call up (and took its key back): its notice, naming whom it blamed, says
    /// more than our timeout.
    fn peer_gave_up(
        &mut self,
        seq: u64,
        error: &symmwin_device::error::Error,
    ) -> Option<symmwin_device::error::Error> {
        if !error.is_timeout() || error.phase() != symmwin_device::error::Phase::Gather {
            return None;
        }
        let notice = self.state.endpoint.queued_give_up(self.shared.id, seq)?;
        Some(notice.error(self.shared.rank))
    }

    /// Export before publishing where the request needs the handle: a rank of a
    /// fabric domain publishes its fabric handle for peers of that domain on other
    /// hosts, and a pad pool's memory is exported on the spot anyway. An allocation's
    /// handle, exported on the worker thread since the allocation was made, is
    /// otherwise collected only once every request is in ([`Rendezvous::collect_handle`]),
    /// so that its export goes on while we publish and wait for the peers. Memory
    /// that may take a released window over needs no handle unless that fails: only
    /// groups whose ranks all share one host keep windows, so then no peer reads it
    /// from the store.
    fn export_ahead(&mut self, own: &Own<'_>, offer: &Offer) -> Result<Option<SharedHandle>> {
        let in_request = self.shared.locality.fabric_domain.is_some();
        let handle = match (offer.reuse, own) {
            (Some(_), _) => None,
            (None, Own::Alloc(_)) if !in_request => None,
            (None, _) => Some(own.export()?),
        };
        self.clock.lap(Step::Export);
        Ok(handle)
    }

    /// Our handle for the exchange: the one exported before publishing, or, unless
    /// our memory may take a released window over, the one exported ahead (waited
    /// for now, if it is still running).
    pub(super) fn collect_handle(
        &mut self,
        own: &Own<'_>,
        offer: &Offer,
        handle: Option<SharedHandle>,
    ) -> Result<Option<SharedHandle>> {
        if handle.is_some() || offer.reuse.is_some() {
            return Ok(handle);
        }
        let handle = own.export()?;
        self.clock.lap(Step::Export);
        Ok(Some(handle))
    }

    /// Publish our request for `ask`: its bytes and the deadline of the gather.
    fn publish(&mut self, ask: Ask<'_>, own_key: &str) -> Result<(Vec<u8>, Instant)> {
        let seq = ask.seq;
        let request = publish::request(self.shared, self.state, ask);
        let deadline = Instant::now() + self.shared.timeout;
        // A stale store and two processes given one rank both show at a group's first
        // rendezvous (an earlier job's requests start at sequence 0; duplicates start
        // together), so later ones skip the lookup: 1 set + 1 wait_all + 1 delete.
        if seq == 0 {
            claim::check_own_key(self.shared, seq, own_key, deadline)?;
        }
        let encoded = request.encode();
        publish::publish(self.shared, own_key, encoded.clone(), deadline)?;
        self.clock.lap(Step::Publish);
        Ok((encoded, deadline))
    }

    /// After the gather: the window every rank agreed on, taken over when every rank
    /// offers the same released one, otherwise mapped fresh. `ours` is our offer and
    /// our handle, if exported already.
    fn make_window(
        &mut self,
        own: &Own<'_>,
        ours: (Offer, Option<SharedHandle>),
        seq: u64,
        keys: Vec<String>,
        requests: Vec<Request>,
    ) -> Result<Exchanged> {
        let peers = publish::peer_addresses(&requests, &keys)?;
        self.state.addresses = Some(peers.clone());
        self.clock.lap(Step::Gather);
        let gathered = Gathered {
            seq,
            keys,
            requests,
            peers,
        };
        self.trade_and_map(own, ours, gathered)
    }
}

/// What the gather of a rendezvous looks at while it waits: give-up notices, and the
/// missing ranks' join records and exits.
struct GatherLooks<'a, F> {
    heard: F,
    joins: join::Joins<'a>,
}

impl<F: FnMut() -> Result<()>> store::GatherLooks for GatherLooks<'_, F> {
    fn tick(&mut self, missing: &[usize]) -> Result<()> {
        (self.heard)()?;
        self.joins.tick(missing)
    }

    fn between(&mut self, missing: &[usize], deadline: Instant) -> Result<()> {
        self.joins.between(missing, deadline)
    }

    fn describe(&self, missing: &[usize]) -> String {
        self.joins.describe(missing)
    }
}

/// The gather's check that no peer gave call `seq` up: a peer that did took its key
/// back, so waiting on for it is waiting out the timeout. The error is the notice's, as
/// when a gather that timed out finds it (phase `Exchange`: where the peer gave up).
fn heard_give_up<'a>(
    shared: &GroupShared,
    endpoint: &'a mut Endpoint,
    seq: u64,
) -> impl FnMut() -> Result<()> + 'a {
    let (group, rank, world) = (shared.id, shared.rank, shared.world);
    move || match endpoint.give_up_while_gathering(group, seq, world)? {
        Some(notice) => Err(notice.error(rank)),
        None => Ok(()),
    }
}
