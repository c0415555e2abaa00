//! Early-message buffering: handles that arrive for a rendezvous this rank has not
//! reached yet are kept, authenticated, until it does.

use super::auth::Authenticated;
use super::transport::Received;
use super::wire::{Offer, Payload};
use super::{Endpoint, Round, Traded};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::SharedHandle;

/// How far ahead of ours a peer's rendezvous can be: it completes a call only with our
/// message for it, so it sends for at most the next one (a margin of one more).
const MAX_AHEAD: u64 = 2;
/// Messages a peer sends for one rendezvous: its first, and its handle after it.
const MAX_PER_CALL: usize = 2;

/// A received, authenticated handle not yet consumed (it arrived early).
#[derive(Debug)]
pub(super) struct Early {
    sender: usize,
    /// The sending process, as the kernel reported it: checked again against the
    /// request of the rendezvous the handle is for once that request is read.
    pid: Option<u32>,
    world: usize,
    physical_size: u64,
    offer: Offer,
    handle: Option<SharedHandle>,
    request: Option<Vec<u8>>,
}

impl Endpoint {
    /// Authenticate a datagram and file it under its rendezvous.
    pub(super) fn route(
        &mut self,
        round: &Round<'_>,
        raw: Received,
        traded: &mut Traded,
    ) -> Result<()> {
        let pid = raw.pid;
        match self.authenticate(round, raw) {
            Ok(Authenticated {
                message,
                handle,
                request,
            }) => {
                if message.payload == Payload::GaveUp {
                    return match message.group == round.group {
                        true => {
                            let notice = (message.seq, message.physical_size);
                            self.heard_give_up(round, message.sender as usize, notice, pid)
                        }
                        false => Ok(()),
                    };
                }
                let early = Early {
                    sender: message.sender as usize,
                    pid,
                    world: message.world as usize,
                    physical_size: message.physical_size,
                    offer: message.offer,
                    handle,
                    request,
                };
                if message.group == round.group && message.seq == round.seq {
                    self.accept(round, early, traded)
                } else if message.group == round.group && message.seq > round.seq {
                    self.keep_early(round, message.seq, early);
                    Ok(())
                } else {
                    // A late message of a finished or failed rendezvous: its fd closes here.
                    tracing::debug!(seq = message.seq, "dropping stale handle");
                    Ok(())
                }
            }
            Err(reason) => {
                self.rejected += 1;
                tracing::warn!("symmwin rank {}: rejected a message: {reason}", round.rank);
                Ok(())
            }
        }
    }

    /// Take a message for the current rendezvous, if its sender is a peer we expect
    /// one from: its offer if it is the sender's first, its handle if it has one and
    /// the sender sent none before.
    pub(super) fn accept(
        &mut self,
        round: &Round<'_>,
        early: Early,
        traded: &mut Traded,
    ) -> Result<()> {
        let sender = early.sender;
        let expected = round.peers.get(sender).map(|p| p.pid);
        if sender == round.rank || expected.is_none() || early.pid != expected {
            self.rejected += 1;
            tracing::warn!(
                "symmwin rank {}: rejected an early handle for rank {sender} from pid {:?}; \
                 its request names pid {:?}",
                round.rank,
                early.pid,
                expected
            );
            return Ok(());
        }
        let disagrees =
            early.world != round.peers.len() || early.physical_size != round.physical_size;
        // A message with a request in it is judged with the requests, whose check names
        // the field every rank disagrees on; the sizes are checked again after it.
        if disagrees && early.request.is_some() {
            traded.misfits.push(sender);
        } else if disagrees {
            return Err(Error::new(
                Phase::Exchange,
                ErrorKind::Mismatch {
                    field: "handle",
                    detail: format!(
                        "rank {sender} sent size {} at world {}, expected size {} at world {}",
                        early.physical_size,
                        early.world,
                        round.physical_size,
                        round.peers.len()
                    ),
                },
            )
            .with_peer(sender));
        }
        if !round.targets.contains(&sender) {
            self.reject_duplicate(round, sender);
            return Ok(());
        }
        let first = traded.offers[sender].is_none();
        if first {
            traded.offers[sender] = Some(early.offer);
            traded.requests[sender] = early.request;
        }
        match (early.handle, &mut traded.handles[sender]) {
            (Some(handle), slot @ None) => {
                *slot = Some(handle);
                self.counts.accepted += 1;
            }
            (None, _) if first => {}
            _ => self.reject_duplicate(round, sender),
        }
        Ok(())
    }

    /// Keep `early` for rendezvous `seq`, unless it is further ahead than a peer can be
    /// or its sender already sent all a rendezvous takes: whatever the sender, what a
    /// peer can queue is bounded (its fds close here).
    fn keep_early(&mut self, round: &Round<'_>, seq: u64, early: Early) {
        let queued = self.early.entry((round.group, seq)).or_default();
        let from_sender = queued.iter().filter(|e| e.sender == early.sender).count();
        if seq - round.seq > MAX_AHEAD || from_sender >= MAX_PER_CALL {
            self.rejected += 1;
            tracing::warn!(
                "symmwin rank {}: dropped a message of rank {} for rendezvous {seq}: \
                 more than a peer can send ahead of rendezvous {}",
                round.rank,
                early.sender,
                round.seq
            );
            return;
        }
        queued.push(early);
    }

    fn reject_duplicate(&mut self, round: &Round<'_>, sender: usize) {
        self.rejected += 1;
        tracing::warn!(
            "symmwin rank {}: unexpected or duplicate message from rank {sender}",
            round.rank
        );
    }
}
