//! What a rendezvous exchanges for, and taking a released window over whole
//! (see [`crate::window_cache`]).

use std::sync::Arc;

use crate::allocation::Allocation;
use crate::exchange::Offer;
use crate::group::GroupShared;
use crate::window_cache::{self, WindowSpan};
use symmwin_device::error::Result;
use symmwin_device::provider::{Memory, SharedHandle};

/// What a rendezvous makes a window for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A user allocation's window.
    Window,
    /// A pool of signal pads, which must read zero before any peer can map it.
    PadPool,
}

impl Purpose {
    /// Our slot must be zeroed before our handle goes to any peer (unless the
    /// provider's memory is zero on creation).
    pub(crate) fn zeroed_before_sharing(self) -> bool {
        self == Purpose::PadPool
    }
}

/// The memory a rendezvous makes a window of.
pub(crate) enum Own<'a> {
    /// A user allocation: handle exported ahead, window cache in play.
    Alloc(&'a Allocation),
    /// A pad pool's memory, exported on the spot, never cached.
    Pool(&'a dyn Memory),
}

impl Own<'_> {
    pub(crate) fn purpose(&self) -> Purpose {
        match self {
            Own::Alloc(_) => Purpose::Window,
            Own::Pool(_) => Purpose::PadPool,
        }
    }

    pub(crate) fn memory(&self) -> &dyn Memory {
        match self {
            Own::Alloc(alloc) => alloc.memory(),
            Own::Pool(memory) => *memory,
        }
    }

    /// Whether our handle can be had without waiting (a pad pool's is exported on
    /// the spot; an allocation's may still be under way on the worker thread).
    pub(crate) fn handle_ready(&self) -> bool {
        match self {
            Own::Alloc(alloc) => alloc.handle_ready(),
            Own::Pool(_) => true,
        }
    }

    pub(crate) fn export(&self) -> Result<SharedHandle> {
        match self {
            Own::Alloc(alloc) => alloc.export(),
            Own::Pool(memory) => memory.export(),
        }
    }

    /// What our first message to each peer says about the window cache of `group`
    /// (it travels over the exchange socket, never through the store).
    pub(crate) fn offer(&self, group: &Arc<GroupShared>) -> Offer {
        match self {
            Own::Alloc(alloc) => Offer::new(
                alloc.reuse_offer(group.cache_key),
                &window_cache::parked_in(group.cache_key),
            ),
            Own::Pool(_) => Offer::default(),
        }
    }

    /// The released window our allocation took, if every rank (`offers`, ours
    /// included) offers that same one; otherwise the old window is dropped (our memory
    /// is mapped anew).
    pub(crate) fn take_over(&self, offers: &[Offer]) -> Option<WindowSpan> {
        let Own::Alloc(alloc) = self else {
            return None;
        };
        let window = alloc.take_reuse()?;
        let agreed = offers.iter().all(|o| o.reuse == Some(window.seq));
        agreed.then_some(window)
    }
}

/// Windows that every rank's offer (ours included) lists as freed.
pub(crate) fn freed_everywhere(offers: &[Offer]) -> Vec<u64> {
    let Some((first, rest)) = offers.split_first() else {
        return Vec::new();
    };
    first
        .freed()
        .iter()
        .copied()
        .filter(|seq| rest.iter().all(|o| o.freed().contains(seq)))
        .collect()
}
