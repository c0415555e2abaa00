//! What one rendezvous trades over the sockets: what goes to every peer, what has
//! come from each, and what a trade waits for.

use super::wire::Offer;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::SharedHandle;

/// What goes to every peer: our word on freed windows, our handle when we have one,
/// and our request when the store does not carry it (it goes in the first message).
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Our word on freed windows.
    pub offer: Offer,
    /// Our handle, if it goes now.
    pub handle: Option<&'a SharedHandle>,
    /// Our request (JSON), if it travels on the socket.
    pub request: Option<&'a [u8]>,
}

/// What the peers of one rendezvous have sent us so far, and what went to them.
#[derive(Debug)]
pub struct Traded {
    /// Each rank's word on freed windows (`None` until its first message came, and at
    /// our own rank).
    pub offers: Vec<Option<Offer>>,
    /// Each rank's handle (`None` until it came, and at our own rank).
    pub handles: Vec<Option<SharedHandle>>,
    /// Each rank's request, when it came with its first message.
    pub requests: Vec<Option<Vec<u8>>>,
    /// Ranks whose message (one with a request) named another world or memory size
    /// than ours: an error once their requests are found to agree (see `check_fit`).
    pub(super) misfits: Vec<usize>,
    pub(super) sent: Vec<Sent>,
}

impl Traded {
    /// Nothing traded yet with any of `world` ranks.
    pub fn new(world: usize) -> Self {
        Traded {
            offers: vec![None; world],
            handles: (0..world).map(|_| None).collect(),
            requests: vec![None; world],
            misfits: Vec::new(),
            sent: vec![Sent::Nothing; world],
        }
    }

    /// After the requests agreed: fails naming the first rank whose message disagreed
    /// with them on the world or memory size.
    pub fn check_fit(&self) -> Result<()> {
        match self.misfits.first() {
            None => Ok(()),
            Some(&rank) => Err(Error::new(
                Phase::Exchange,
                ErrorKind::Mismatch {
                    field: "handle",
                    detail: format!("rank {rank}'s message disagrees with its request on sizes"),
                },
            )
            .with_peer(rank)),
        }
    }

    pub(super) fn has(&self, awaited: Awaited, rank: usize) -> bool {
        match awaited {
            Awaited::Offers => self.offers[rank].is_some(),
            Awaited::Requests => self.requests[rank].is_some(),
            Awaited::Handles => self.handles[rank].is_some(),
        }
    }

    /// The ranks of `targets` whose `awaited` part has not come yet.
    pub(super) fn missing(&self, targets: &[usize], awaited: Awaited) -> Vec<usize> {
        targets
            .iter()
            .copied()
            .filter(|&r| !self.has(awaited, r))
            .collect()
    }
}

/// What a call of [`Endpoint::trade`] waits for from every target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// A first message (its offer; a handle may come with it).
    Offers,
    /// A first message with the sender's request in it.
    Requests,
    /// A handle.
    Handles,
}

/// What went to a peer in this rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Sent {
    Nothing,
    OfferOnly,
    Handle,
}
