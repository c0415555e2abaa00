//! Datagrams that come while this rank still gathers the requests of a call.
//!
//! Their senders cannot be authenticated yet (the requests name the pids), so they are
//! held, fds and all, and routed once the exchange's round starts. A give-up notice
//! for the call is read on the spot, on our uid and token alone, as after a failed
//! gather: a rank still gathering hears at once that a peer gave the call up, instead
//! of waiting its whole timeout for the key that peer took back as it left.

use super::transport::Received;
use super::wire::{decode_framed, Payload};
use super::{Endpoint, GaveUp, Round, Traded};
use symmwin_device::error::Result;

/// How many datagrams a gather may hold beyond two per peer: for one rendezvous a peer
/// sends at most its first exchange message and a give-up notice before we have read its
/// request, so what comes beyond that is dropped.
const HELD_SPARE: usize = 16;

impl Endpoint {
    /// While the requests of call `seq` of `group` (of `world` ranks) are gathered: a
    /// give-up notice a peer sent for that call, if one came. What else came is held
    /// for the exchange.
    pub fn give_up_while_gathering(
        &mut self,
        group: u64,
        seq: u64,
        world: usize,
    ) -> Result<Option<GaveUp>> {
        if self.gather_began.is_none_or(|(began, _)| began != seq) {
            self.gather_began = Some((seq, self.fds_dropped));
        }
        while let Some(raw) = self.receive_one()? {
            if let Some(notice) = self.as_give_up(&raw, group, seq) {
                self.held.clear();
                return Ok(Some(notice));
            }
            if raw.uid != Some(self.uid) || self.held.len() >= 2 * world + HELD_SPARE {
                self.rejected += 1;
                tracing::warn!(
                    "symmwin: dropped a datagram from pid {:?} that came during the gather",
                    raw.pid
                );
                continue;
            }
            self.held.push(raw);
        }
        Ok(None)
    }

    /// The give-up notice `raw` carries for call `seq` of `group`, if it is one under
    /// our uid with our token. (Its sender's pid cannot be checked: its request may be
    /// the one we never read.)
    pub(super) fn as_give_up(&self, raw: &Received, group: u64, seq: u64) -> Option<GaveUp> {
        if raw.uid != Some(self.uid) || raw.truncated {
            return None;
        }
        let (message, _) = decode_framed(&raw.bytes).ok()?;
        let ours = message.group == group && message.seq == seq;
        if !ours || message.payload != Payload::GaveUp || !self.token.matches(&message.token) {
            return None;
        }
        Some(GaveUp {
            seq,
            rank: message.sender as usize,
            blames: super::give_up::decode_blame(message.physical_size),
        })
    }

    /// Route what was held during the gather, now that `round` names the senders.
    pub(super) fn route_held(&mut self, round: &Round<'_>, traded: &mut Traded) -> Result<()> {
        for raw in std::mem::take(&mut self.held) {
            self.route(round, raw, traded)?;
        }
        Ok(())
    }

    /// The count of fd-less datagrams (see `fds_dropped`) that round `seq`'s figures
    /// start from: where its gather began, when datagrams were held then.
    pub(super) fn fds_dropped_baseline(&mut self, seq: u64) -> u64 {
        match self.gather_began.take() {
            Some((began, count)) if began == seq => count,
            _ => self.fds_dropped,
        }
    }
}
