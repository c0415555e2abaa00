//! Making the window once the ranks agree: trade offers (taking a released window
//! over whole when every rank offers it), or map our own memory, trade handles,
//! import and map the peers'.

use super::clock::Step;
use super::import;
use super::request::Request;
use super::reuse::{self, Own};
use super::run::{Exchanged, Gathered, Rendezvous};
use super::spanning;
use crate::exchange::{Awaited, Offer, Outgoing, Round, Traded};
use crate::locality::Reach;
use crate::window_cache;
use symmwin_device::error::Result;
use symmwin_device::layout::FlatLayout;
use symmwin_device::lock::Recover;
use symmwin_device::provider::{HandleType, Memory, SharedHandle, Span};

/// The span reserved for a fresh window, and whether our slot is mapped already.
pub(super) struct Reserved {
    span: Box<dyn Span>,
    layout: FlatLayout,
    own_mapped: bool,
}

/// Who we trade with, as every rank decides it from the same requests.
pub(super) struct Plan {
    /// How every rank's memory reaches us.
    pub(super) reach: Vec<Reach>,
    /// The peers whose handles travel over the socket.
    pub(super) targets: Vec<usize>,
    /// Every peer is one of them: the group keeps windows (and needs no store once
    /// its ranks know each other's sockets).
    pub(super) cacheable: bool,
}

impl Plan {
    /// The plan for `requests`, confirming each socket peer's socket (`rank` is ours).
    pub(super) fn of(requests: &[Request], rank: usize, handle_type: HandleType) -> Result<Self> {
        let reach = spanning::reach(requests, rank, handle_type)?;
        let targets: Vec<usize> = (0..requests.len())
            .filter(|&r| reach[r] == Reach::Socket)
            .collect();
        let cacheable = spanning::one_host(requests) && targets.len() + 1 == requests.len();
        Ok(Plan {
            reach,
            targets,
            cacheable,
        })
    }
}

/// Our side of a trade under way: our offer, our handle (until it has gone), the span
/// when reserved already, and what the peers have sent so far.
pub(super) struct Trading {
    pub(super) offer: Offer,
    pub(super) handle: Option<SharedHandle>,
    pub(super) reserved: Option<Reserved>,
    pub(super) traded: Traded,
    /// Every peer's offer is in.
    pub(super) offers_in: bool,
}

impl Rendezvous<'_> {
    /// Once the ranks agree through the store: trade offers with the peers over the
    /// socket (in a group that keeps windows), then [`Rendezvous::finish`]. `ours`
    /// is our offer and our handle, if exported already (it then goes with our offer).
    pub(super) fn trade_and_map(
        &mut self,
        own: &Own<'_>,
        ours: (Offer, Option<SharedHandle>),
        gathered: Gathered,
    ) -> Result<Exchanged> {
        let shared = self.shared;
        let (offer, handle) = ours;
        let plan = Plan::of(
            &gathered.requests,
            shared.rank,
            shared.provider.info().handle_type,
        )?;
        self.clock.lap(Step::Gather);
        if self.state.watched.is_none() {
            let mut pids = vec![0; self.shared.world];
            for &r in plan
                .targets
                .iter()
                .filter(|&&r| still_its(&gathered.requests[r]))
            {
                pids[r] = gathered.peers[r].pid;
            }
            let registered = symmwin_device::peer_watch::register(pids);
            *self.shared.peers.write().recover() = registered.set();
            self.state.watched = Some(registered);
        }
        let reserved = self.reserve_early(own, &offer)?;
        let handle = self.collect_handle(own, &offer, handle)?;
        let mut trading = Trading {
            offer,
            reserved,
            handle,
            traded: Traded::new(shared.world),
            offers_in: false,
        };
        if plan.cacheable && matches!(own, Own::Alloc(_)) {
            let round = self.round(&gathered, &plan.targets, own);
            let out = Outgoing {
                offer,
                handle: trading.handle.as_ref(),
                request: None,
            };
            self.trade(&round, &mut trading.traded, &out, Awaited::Offers)?;
            self.clock.lap(Step::Exchange);
            trading.offers_in = true;
            self.go_direct(&gathered, &plan);
        }
        self.finish(own, trading, gathered, plan)
    }

    /// Every peer of a group that keeps windows has sent us a message, which it does
    /// only after reading every request and deciding the same: from now on the
    /// ranks' requests travel over the sockets (see `direct`). Deciding it only once
    /// every peer was heard from keeps the ranks in step when a first rendezvous
    /// fails on some of them before its trade.
    fn go_direct(&mut self, gathered: &Gathered, plan: &Plan) {
        if plan.cacheable && self.state.direct.is_none() {
            self.state.direct = Some(gathered.peers.clone());
        }
    }

    /// The span reserved before any trade, where it must or may be: a pad pool's slot
    /// must read zero before any peer gets our handle; memory that cannot take a
    /// released window over is mapped fresh in any case, and a span we cannot reserve
    /// is our own failure, to report before any trade.
    pub(super) fn reserve_early(
        &mut self,
        own: &Own<'_>,
        offer: &Offer,
    ) -> Result<Option<Reserved>> {
        let early = own.purpose().zeroed_before_sharing() || offer.reuse.is_none();
        let map_now = offer.reuse.is_none() && !own.handle_ready();
        early.then(|| self.map_own(own, map_now)).transpose()
    }

    /// The exchange round of rendezvous `gathered.seq` with `targets`.
    pub(super) fn round<'r>(
        &self,
        gathered: &'r Gathered,
        targets: &'r [usize],
        own: &Own<'_>,
    ) -> Round<'r> {
        Round {
            group: self.shared.id,
            seq: gathered.seq,
            rank: self.shared.rank,
            peers: &gathered.peers,
            targets,
            physical_size: own.memory().len() as u64,
        }
    }

    /// Every request is in and agrees: take a released window over whole when every
    /// rank offers the same one (once every peer's offer is in); otherwise trade
    /// handles, import and map.
    pub(super) fn finish(
        &mut self,
        own: &Own<'_>,
        mut trading: Trading,
        gathered: Gathered,
        plan: Plan,
    ) -> Result<Exchanged> {
        let world = self.shared.world;
        if trading.offers_in {
            if let Some(window) = self.settle_offers(own, trading.offer, &trading.traded) {
                self.clock.mark_reused();
                return Ok(Exchanged {
                    span: window.span,
                    layout: window.layout,
                    mapped: vec![true; world],
                    requests: gathered.requests,
                    seq: gathered.seq,
                    cacheable: true,
                });
            }
        }
        let handle = match trading.handle.take() {
            Some(handle) => handle,
            None => {
                let handle = own.export()?;
                self.clock.lap(Step::Export);
                handle
            }
        };
        let mut reserved = match trading.reserved.take() {
            Some(reserved) => reserved,
            None => self.map_own(own, false)?,
        };
        let round = self.round(&gathered, &plan.targets, own);
        let out = Outgoing {
            offer: trading.offer,
            handle: Some(&handle),
            request: None,
        };
        self.trade(&round, &mut trading.traded, &out, Awaited::Handles)?;
        self.go_direct(&gathered, &plan);
        // Closing an exported CUDA fd is not free; count it here, not nowhere.
        drop(handle);
        let handles = with_fabric_handles(&gathered, &plan.reach, trading.traded.handles)?;
        self.clock.lap(Step::Exchange);
        self.import_and_map(&mut reserved, own.memory(), handles)?;
        Ok(Exchanged {
            span: reserved.span,
            layout: reserved.layout,
            cacheable: plan.cacheable,
            requests: gathered.requests,
            seq: gathered.seq,
            mapped: plan.reach.iter().map(|r| r.is_mapped()).collect(),
        })
    }

    /// One trade with the peers of `round` (see [`crate::exchange::Endpoint::trade`]).
    pub(super) fn trade(
        &mut self,
        round: &Round<'_>,
        traded: &mut Traded,
        ours: &Outgoing<'_>,
        awaited: Awaited,
    ) -> Result<()> {
        let timeout = self.shared.timeout;
        self.state
            .endpoint
            .trade(round, traded, ours, awaited, timeout)
    }

    /// Every rank's offer is in (`offer` is ours): release the windows every rank
    /// has freed, and take ours over if every rank offers the same released one. A
    /// rank whose offer is missing lists nothing and offers nothing: no release.
    fn settle_offers(
        &mut self,
        own: &Own<'_>,
        offer: Offer,
        traded: &Traded,
    ) -> Option<crate::window_cache::WindowSpan> {
        let rank = self.shared.rank;
        let offers: Vec<Offer> = (0..self.shared.world)
            .map(|r| match r == rank {
                true => offer,
                false => traded.offers[r].unwrap_or_default(),
            })
            .collect();
        window_cache::release(self.shared.cache_key, &reuse::freed_everywhere(&offers));
        own.take_over(&offers)
    }

    /// Reserve the span, mapping and zeroing our own slot first where the window's
    /// purpose needs it zero before any peer gets our handle, and mapping it first
    /// when `map_now` (while our export is still running: the mapping then costs the
    /// rendezvous nothing); otherwise our slot is mapped with the peers', in one batch
    /// (one access grant for the whole span).
    fn map_own(&mut self, own: &Own<'_>, map_now: bool) -> Result<Reserved> {
        let shared = self.shared;
        let memory = own.memory();
        let stride = memory.len();
        let span_len = FlatLayout::span_len(stride, shared.world)?;
        // The whole span is reserved (the layout stays base + r * stride), but only
        // the slots of mapped ranks are mapped; the others cost no memory.
        let mut span = shared.provider.reserve(span_len)?;
        let layout = FlatLayout::new(span.base(), stride, shared.world)?;
        let zero_first =
            own.purpose().zeroed_before_sharing() && !shared.provider.info().zero_on_create;
        let own_mapped = zero_first || map_now;
        let own_offset = layout.offset_of(shared.rank)?;
        if own_mapped {
            span.map(own_offset, memory)?;
        }
        if zero_first {
            span.zero(own_offset, stride)?;
        }
        self.clock.lap(Step::Reserve);
        Ok(Reserved {
            span,
            layout,
            own_mapped,
        })
    }

    /// Import every peer's handle, then map every slot not mapped yet in one batch.
    fn import_and_map(
        &mut self,
        reserved: &mut Reserved,
        memory: &dyn Memory,
        handles: Vec<Option<SharedHandle>>,
    ) -> Result<()> {
        let shared = self.shared;
        let imported = import::import_all(&shared.provider, handles, memory.len(), shared.timeout)?;
        self.clock.lap(Step::Import);
        map_slots(
            reserved.span.as_mut(),
            &reserved.layout,
            (self.shared.rank, memory, reserved.own_mapped),
            &imported,
        )?;
        self.clock.lap(Step::Map);
        Ok(())
    }
}

/// The handles by rank: those that came over the socket, and the fabric handles of
/// peers on other hosts from their requests (`None` at our own rank and at ranks we
/// do not map).
fn with_fabric_handles(
    gathered: &Gathered,
    reach: &[Reach],
    mut handles: Vec<Option<SharedHandle>>,
) -> Result<Vec<Option<SharedHandle>>> {
    for (peer, slot) in handles.iter_mut().enumerate() {
        if reach[peer] == Reach::Store {
            *slot = Some(spanning::handle_from_store(
                &gathered.requests[peer],
                &gathered.keys[peer],
            )?);
        }
    }
    Ok(handles)
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

/// Whether the pid of `request` may be watched for its writer: unless another process
/// runs under it now (the writer is gone and its pid reused), whose exit would be
/// taken for the writer's and whose life would hide the writer's death. A writer gone
/// with no successor is watched, and so marked ended at once.
fn still_its(request: &Request) -> bool {
    use crate::process_start::{liveness, start_time, Liveness};
    liveness(request.pid, request.start_time, request.uid) != Liveness::Gone
        || start_time(request.pid).is_err()
}
