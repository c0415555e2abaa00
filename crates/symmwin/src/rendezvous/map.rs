//! Making the window once the ranks agree: trade offers (taking a released window
//! over whole when every rank offers it), or map our own memory, trade handles,
//! import and map the peers'.

use super::clock::Step;
use super::import;
use super::locality::Reach;
use super::reuse::{self, Own};
use super::run::{Exchanged, Gathered, Rendezvous};
use super::spanning;
use crate::error::{Error, Result};
use crate::exchange::{Awaited, Offer, Round, Traded};
use crate::layout::FlatLayout;
use crate::provider::{Memory, SharedHandle, Span};
use crate::window_cache;

/// The span reserved for a fresh window, and whether our slot is mapped already.
struct Reserved {
    span: Box<dyn Span>,
    layout: FlatLayout,
    own_mapped: bool,
}

impl Rendezvous<'_> {
    /// Once the ranks agree: trade offers with the peers over the socket (in a group
    /// that keeps windows), take a released window over whole when every rank offers
    /// the same one; otherwise trade handles, import and map. `ours` is our offer and
    /// our handle, if exported already (it then goes with our offer).
    pub(super) fn trade_and_map(
        &mut self,
        own: &Own<'_>,
        ours: (Offer, Option<SharedHandle>),
        gathered: Gathered,
    ) -> Result<Exchanged> {
        let shared = self.shared;
        let (offer, handle) = ours;
        let requests = &gathered.requests;
        let reach = spanning::reach(requests, shared.rank, shared.provider.info().handle_type)?;
        self.clock.lap(Step::Gather);
        let handle = self.collect_handle(own, &offer, handle)?;
        let targets: Vec<usize> = (0..shared.world)
            .filter(|&r| reach[r] == Reach::Socket)
            .collect();
        let cacheable = spanning::one_host(requests) && targets.len() + 1 == shared.world;
        let round = Round {
            group: shared.id,
            seq: gathered.seq,
            rank: shared.rank,
            peers: &gathered.peers,
            targets: &targets,
            physical_size: own.memory().len() as u64,
        };
        let mut traded = Traded::new(shared.world);
        // A pad pool's slot must read zero before any peer gets our handle; memory
        // that cannot take a released window over is mapped fresh in any case, and a
        // span we cannot reserve is our own failure, to report before any trade.
        let early_reserve = own.purpose().zeroed_before_sharing() || offer.reuse.is_none();
        let mut reserved = early_reserve.then(|| self.map_own(own)).transpose()?;
        if cacheable && matches!(own, Own::Alloc(_)) {
            self.trade(
                &round,
                &mut traded,
                (offer, handle.as_ref()),
                Awaited::Offers,
            )?;
            self.clock.lap(Step::Exchange);
            if let Some(window) = self.settle_offers(own, offer, &traded) {
                self.clock.mark_reused();
                return Ok(Exchanged {
                    span: window.span,
                    layout: window.layout,
                    mapped: vec![true; shared.world],
                    requests: gathered.requests,
                    seq: gathered.seq,
                    cacheable: true,
                });
            }
        }
        let handle = match handle {
            Some(handle) => handle,
            None => {
                let handle = own.export()?;
                self.clock.lap(Step::Export);
                handle
            }
        };
        if reserved.is_none() {
            reserved = Some(self.map_own(own)?);
        }
        self.trade(
            &round,
            &mut traded,
            (offer, Some(&handle)),
            Awaited::Handles,
        )?;
        // Closing an exported CUDA fd is not free; count it here, not nowhere.
        drop(handle);
        let handles = with_fabric_handles(&gathered, &reach, traded.handles)?;
        self.clock.lap(Step::Exchange);
        let mut reserved = reserved.ok_or_else(|| Error::invalid("no span was reserved"))?;
        self.import_and_map(&mut reserved, own.memory(), handles)?;
        Ok(Exchanged {
            span: reserved.span,
            layout: reserved.layout,
            cacheable,
            requests: gathered.requests,
            seq: gathered.seq,
            mapped: reach.iter().map(|r| r.is_mapped()).collect(),
        })
    }

    /// One trade with the peers of `round` (see [`crate::exchange::Endpoint::trade`]).
    fn trade(
        &mut self,
        round: &Round<'_>,
        traded: &mut Traded,
        ours: (Offer, Option<&SharedHandle>),
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
        window_cache::release(self.shared, &reuse::freed_everywhere(&offers));
        own.take_over(&offers)
    }

    /// Reserve the span, mapping and zeroing our own slot first where the window's
    /// purpose needs it zero before any peer gets our handle; otherwise our slot is
    /// mapped with the peers', in one batch.
    fn map_own(&mut self, own: &Own<'_>) -> Result<Reserved> {
        let shared = self.shared;
        let memory = own.memory();
        let stride = memory.len();
        let span_len = FlatLayout::span_len(stride, shared.world)?;
        // The whole span is reserved (the layout stays base + r * stride), but only
        // the slots of mapped ranks are mapped; the others cost no memory.
        let mut span = shared.provider.reserve(span_len)?;
        let layout = FlatLayout::new(span.base(), stride, shared.world)?;
        let own_mapped =
            own.purpose().zeroed_before_sharing() && !shared.provider.info().zero_on_create;
        if own_mapped {
            span.map(shared.rank * stride, memory)?;
            span.zero(shared.rank * stride, stride)?;
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
