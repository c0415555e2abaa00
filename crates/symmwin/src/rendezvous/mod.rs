//! Rendezvous: publish a request, check that every rank agrees, exchange handles,
//! import, and map every rank's memory into one flat span.
//!
//! The steps, in order, each in its own module: say this rank has started the group's
//! first rendezvous (`join`), publish and gather-and-validate
//! (`publish`; over the sockets instead once the ranks know each other's, `direct`),
//! take a released window over (`reuse`) or map own memory, exchange handles, import
//! and map peers (`map`, `import`), retire keys (`retire`), then claim a signal-pad
//! slot (`pads`, growing the pools by a rendezvous of their own); `run` holds the
//! orchestrator and `clock` the phase times.

mod claim;
mod clock;
mod direct;
mod give_up;
mod import;
mod join;
mod map;
mod pads;
mod publish;
pub mod request;
mod retire;
mod reuse;
mod run;
mod spanning;

use std::time::Instant;

use crate::allocation::Allocation;
use crate::group::{Group, GroupState};
use crate::window::Window;
use clock::Step;
use give_up::settled_alike;
use publish::PadAsk;
use reuse::Own;
use run::Rendezvous;
use symmwin_device::error::{Error, Result};

/// Wall time spent in each phase of one rendezvous, for `symmwin bench rendezvous`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PhaseTimes {
    /// Getting the shareable handle to our memory: for an allocation, waiting for the
    /// export started when it was made, once every request is in (zero when it has
    /// finished by then); for a pad pool, the export itself.
    pub export_us: f64,
    /// Publishing the request.
    pub publish_us: f64,
    /// Waiting for and validating every request.
    pub gather_us: f64,
    /// Reserving the span (and mapping our own memory first: where it must be zeroed
    /// before any peer can map it, pad pools; and while our export is still running).
    pub reserve_us: f64,
    /// Trading with every peer over the socket: our word on freed windows and our
    /// handle out, theirs in.
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
        let mut state = self.lock_state()?;
        if let Some(out_of_step) = &state.out_of_step {
            return Err(out_of_step.error(self.shared.rank));
        }
        let result = match self.bad_argument(alloc, pad_size) {
            Some(message) => {
                // Peers take part in this rendezvous number: skipping it here puts the
                // group out of step, which `give_up` tells them.
                state.next_seq += 1;
                Err(Error::invalid(message))
            }
            None => self.make_window(&mut state, alloc, pad_size),
        };
        result.inspect_err(|e| {
            // Our offer or handle may have gone out: a peer may map this memory.
            alloc.shared_in_failed_call();
            if !settled_alike(e) {
                give_up::give_up(&self.shared, &mut state, e);
            }
        })
    }

    /// The collective steps of [`Group::rendezvous`]: exchange, then claim a pad slot.
    fn make_window(
        &self,
        state: &mut GroupState,
        alloc: &Allocation,
        pad_size: usize,
    ) -> Result<(Window, PhaseTimes)> {
        let ask = PadAsk::of(&self.shared, pad_size);
        let mut run = Rendezvous::new(&self.shared, state);
        let exchanged = run.exchange(Own::Alloc(alloc), alloc.size(), &ask)?;
        let pads_started = Instant::now();
        let lease = if pad_size == 0 {
            None
        } else {
            run.scrub_pads(&exchanged.requests, pad_size);
            Some(run.claim_pad(&exchanged.requests, pad_size)?)
        };
        run.clock.add_since(Step::Pads, pads_started);
        let times = run.clock.times();
        let window = Window::new(
            std::sync::Arc::clone(&self.shared),
            exchanged.span,
            exchanged.layout,
            lease,
            exchanged.mapped,
            alloc,
            exchanged.cacheable.then_some(exchanged.seq),
        );
        Ok((window, times))
    }

    /// Why `alloc` and `pad_size` cannot make a window of this group, if they cannot.
    fn bad_argument(&self, alloc: &Allocation, pad_size: usize) -> Option<String> {
        let shared = &self.shared;
        if shared.provider.info() != alloc.provider().info() {
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
        }
    }
}

/// A group of `world` ranks on a memory store (`store`, or a new one) and the host
/// provider, as rank `rank`, for the steps' unit tests.
#[cfg(test)]
fn test_group(
    name: &str,
    rank: usize,
    world: usize,
    store: Option<std::sync::Arc<crate::store::MemoryStore>>,
) -> (Group, std::sync::Arc<crate::store::MemoryStore>) {
    use std::sync::Arc;
    let store = store.unwrap_or_default();
    let provider = Arc::new(symmwin_host::HostProvider::new());
    let config = crate::config::Config::from_env().unwrap();
    let spec = crate::group::GroupSpec::new(name, rank, world);
    let group = Group::new(spec, store.clone(), provider, &config).unwrap();
    (group, store)
}
