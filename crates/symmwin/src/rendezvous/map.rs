//! Making a window of fresh memory once the ranks agree: map our own memory,
//! exchange handles, import and map the peers'.

use super::clock::Step;
use super::import;
use super::locality::Reach;
use super::reuse::Own;
use super::run::{Exchanged, Gathered, Rendezvous};
use super::spanning;
use crate::error::Result;
use crate::exchange::Round;
use crate::layout::FlatLayout;
use crate::provider::{Memory, SharedHandle, Span};

/// The span reserved for a fresh window, and whether our slot is mapped already.
struct Reserved {
    span: Box<dyn Span>,
    layout: FlatLayout,
    own_mapped: bool,
}

impl Rendezvous<'_> {
    /// Make a window of fresh memory from the gathered requests: reserve the span,
    /// send `handle` to the peers that take it over the socket, take theirs (and
    /// fabric peers' from their requests), import and map.
    pub(super) fn map_fresh(
        &mut self,
        own: &Own<'_>,
        handle: SharedHandle,
        gathered: Gathered,
    ) -> Result<Exchanged> {
        let memory = own.memory();
        let mut reserved = self.map_own(own)?;
        let (reach, handles) = self.exchange_handles(&gathered, handle, memory.len())?;
        self.import_and_map(&mut reserved, memory, handles)?;
        Ok(Exchanged {
            span: reserved.span,
            layout: reserved.layout,
            cacheable: spanning::one_host(&gathered.requests),
            requests: gathered.requests,
            seq: gathered.seq,
            reused: false,
            mapped: reach.iter().map(|r| r.is_mapped()).collect(),
        })
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

    /// Send our handle to the peers that import it from the socket and take theirs;
    /// peers on other hosts get nothing (those of our fabric domain read our
    /// request), and theirs come from their requests. How each rank reaches us, and
    /// the handles by rank (`None` at our own rank and at ranks we do not map).
    fn exchange_handles(
        &mut self,
        gathered: &Gathered,
        handle: SharedHandle,
        physical_size: usize,
    ) -> Result<(Vec<Reach>, Vec<Option<SharedHandle>>)> {
        let shared = self.shared;
        let requests = &gathered.requests;
        let reach = spanning::reach(requests, shared.rank, shared.provider.info().handle_type)?;
        let targets: Vec<usize> = (0..shared.world)
            .filter(|&r| reach[r] == Reach::Socket)
            .collect();
        let round = Round {
            group: shared.id,
            seq: gathered.seq,
            rank: shared.rank,
            peers: &gathered.peers,
            targets: &targets,
            physical_size: physical_size as u64,
        };
        let mut handles = self
            .state
            .endpoint
            .all_gather(&round, &handle, shared.timeout)?;
        // Closing an exported CUDA fd is not free; count it here, not nowhere.
        drop(handle);
        for (peer, slot) in handles.iter_mut().enumerate() {
            if reach[peer] == Reach::Store {
                *slot = Some(spanning::handle_from_store(
                    &requests[peer],
                    &gathered.keys[peer],
                )?);
            }
        }
        self.clock.lap(Step::Exchange);
        Ok((reach, handles))
    }

    /// Import every peer's handle, then map every slot not mapped yet in one batch.
    fn import_and_map(
        &mut self,
        reserved: &mut Reserved,
        memory: &dyn Memory,
        handles: Vec<Option<SharedHandle>>,
    ) -> Result<()> {
        let imported = import::import_all(self.shared.provider.as_ref(), handles, memory.len())?;
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
