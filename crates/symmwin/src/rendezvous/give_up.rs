//! A rendezvous that failed here: the group is out of step from that call on, and
//! the peers are told so (see [`crate::exchange::GaveUp`]).
//!
//! Only a verdict every rank reaches from the same requests (they disagree, or a rank
//! cannot reach a peer it cannot map, so each rank refuses the call) leaves the group
//! in step: every other failure is local to
//! this rank (its deadline, its arguments, a step that failed here), and a peer may
//! have completed the same call, or may complete it from our queued message.

use crate::exchange::GaveUp;
use crate::group::{GroupShared, GroupState, OutOfStep};
use symmwin_device::error::{Error, ErrorKind, Phase};

/// Whether every rank that took part reached the verdict `error` from the same set of
/// requests, so that the group is still in step after it.
pub(super) fn settled_alike(error: &Error) -> bool {
    // Both kinds come, in the gather, only from `request::validate`.
    matches!(
        error.kind(),
        ErrorKind::Mismatch { .. } | ErrorKind::Unsupported(_)
    ) && error.phase() == Phase::Gather
}

/// Our last rendezvous failed with `error`: mark the group out of step, tell every
/// peer whose address we know, and close whatever they queued for later calls.
pub(super) fn give_up(shared: &GroupShared, state: &mut GroupState, error: &Error) {
    let seq = state.next_seq.saturating_sub(1);
    let out_of_step = match error.kind() {
        ErrorKind::OutOfStep { since, rank, why } => OutOfStep {
            since: *since,
            rank: *rank,
            why: why.clone(),
        },
        kind => OutOfStep {
            since: seq,
            rank: shared.rank,
            why: format!(
                "it failed there: {}",
                symmwin_device::text::clip(&kind.to_string())
            ),
        },
    };
    let peers = state.direct.clone().or_else(|| state.addresses.clone());
    if let Some(peers) = peers {
        let notice = GaveUp {
            seq,
            rank: shared.rank,
            blames: blamed(error).filter(|&p| p != shared.rank),
        };
        state.endpoint.tell_give_up(shared.id, notice, &peers);
    }
    state.endpoint.forget_queued();
    state.out_of_step = Some(out_of_step);
}

/// The rank `error` holds responsible: its peer, or the one rank a timeout waited for.
fn blamed(error: &Error) -> Option<usize> {
    error.peer().or(match error.kind() {
        ErrorKind::Timeout { missing, .. } if missing.len() == 1 => Some(missing[0]),
        _ => None,
    })
}
