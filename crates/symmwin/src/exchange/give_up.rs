//! Giving a rendezvous up, and hearing that a peer did.
//!
//! A rank that fails a rendezvous (its deadline passed, it was interrupted, it refused
//! its own arguments, a step failed) may already have sent its first message for that
//! call, and a peer that reaches the call later would complete it from that queued
//! message: the two ranks would then pair different calls from then on. So a rank that
//! gives call `seq` up tells every peer it knows ([`Payload::GaveUp`]), and a rank that
//! hears of it fails that call, or the next one if it had already returned, and every
//! later one (see `docs/design.md`, "All or nothing"). The notice is authenticated like
//! every other message, so only the peer process itself can give its call up.

use super::wire::{Message, Offer, Payload, FABRIC_LEN};
use super::{Endpoint, PeerAddress, Round};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// How long a give-up notice is retried against a peer whose queue is full: the notice
/// is a courtesy that saves the peer its timeout, so it never holds up our own error.
const NOTICE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

/// The first give-up notice heard from a peer of this group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaveUp {
    /// The rendezvous number the peer gave up.
    pub seq: u64,
    /// The peer.
    pub rank: usize,
    /// The rank the peer's own error named, if any: usually the cause.
    pub blames: Option<usize>,
}

impl GaveUp {
    /// The error every rendezvous of the group fails with from `self.seq` on, for
    /// rank `us`; its peer is the rank to blame (the one the giver named, if not us).
    pub fn error(self, us: usize) -> Error {
        let (why, culprit) = match self.blames {
            Some(blamed) if blamed != us => (
                format!("rank {} gave that call up, naming rank {blamed}", self.rank),
                blamed,
            ),
            _ => (format!("rank {} gave that call up", self.rank), self.rank),
        };
        Error::new(
            Phase::Exchange,
            ErrorKind::OutOfStep {
                since: self.seq,
                rank: self.rank,
                why,
            },
        )
        .with_peer(culprit)
    }
}

impl Endpoint {
    /// The first give-up notice heard from a peer, if any.
    pub fn gave_up(&self) -> Option<GaveUp> {
        self.gave_up
    }

    /// Rank `sender` (process `pid`, as the kernel reports it) says it gave call `seq`
    /// up: an error when that is this call or an earlier one; a later one fails when
    /// we reach it (the peer finished this one first, or it could not be later).
    pub(super) fn heard_give_up(
        &mut self,
        round: &Round<'_>,
        sender: usize,
        message: (u64, u64),
        pid: Option<u32>,
    ) -> Result<()> {
        let (seq, blames) = message;
        let expected = round.peers.get(sender).map(|p| p.pid);
        if sender == round.rank || expected.is_none() || pid != expected {
            self.rejected += 1;
            tracing::warn!(
                "symmwin rank {}: rejected a give-up notice for rank {sender} from pid {pid:?}",
                round.rank
            );
            return Ok(());
        }
        let blames = decode_blame(blames).filter(|&b| b < round.peers.len());
        let heard = GaveUp {
            seq,
            rank: sender,
            blames,
        };
        if self.gave_up.is_none_or(|g| seq < g.seq) {
            self.gave_up = Some(heard);
        }
        self.forget_queued();
        match seq <= round.seq {
            true => Err(heard.error(round.rank)),
            false => Ok(()),
        }
    }

    /// After a gather through the store failed: a give-up notice some peer sent us
    /// for call `seq` of `group`, if one was held or is queued (what else came belongs
    /// to a call that has failed here and is closed).
    pub fn queued_give_up(&mut self, group: u64, seq: u64) -> Option<GaveUp> {
        let mut found = None;
        for raw in std::mem::take(&mut self.held) {
            found = found.or_else(|| self.as_give_up(&raw, group, seq));
        }
        while let Ok(Some(raw)) = self.receive_one() {
            found = found.or_else(|| self.as_give_up(&raw, group, seq));
        }
        found
    }

    /// Close every handle kept for a later rendezvous (the group is out of step, or
    /// those calls were skipped).
    pub fn forget_queued(&mut self) {
        self.early.clear();
    }

    /// Tell every peer in `peers` but `notice.rank` (ours) that we gave rendezvous
    /// `notice.seq` of group `group` up, naming the rank our error named. Best effort
    /// and quick: a peer that is gone, or whose queue stays full, is left to its own
    /// timeout.
    pub fn tell_give_up(&mut self, group: u64, notice: GaveUp, peers: &[PeerAddress]) {
        let rank = notice.rank;
        for (peer, address) in peers.iter().enumerate() {
            if peer == rank {
                continue;
            }
            if let Err(e) = self.send_give_up(group, notice, (peer, peers.len()), address) {
                tracing::debug!("symmwin rank {rank}: no give-up notice to rank {peer}: {e}");
            }
        }
        self.forget_queued();
    }

    fn send_give_up(
        &mut self,
        group: u64,
        notice: GaveUp,
        (peer, world): (usize, usize),
        address: &PeerAddress,
    ) -> Result<()> {
        let beyond = |what: &str| Error::invalid(format!("{what} beyond u32"));
        let message = Message {
            group,
            seq: notice.seq,
            sender: u32::try_from(notice.rank).map_err(|_| beyond("rank"))?,
            world: u32::try_from(world).map_err(|_| beyond("world"))?,
            token: address.token.bytes(),
            physical_size: encode_blame(notice.blames),
            offer: Offer::default(),
            payload: Payload::GaveUp,
        };
        let mut buf = [0u8; FABRIC_LEN];
        let bytes = message.encode(&mut buf);
        let deadline = std::time::Instant::now() + NOTICE_PATIENCE;
        while !self.send_to(address, peer, bytes, None)? {
            if std::time::Instant::now() >= deadline {
                let missing = vec![peer];
                let kind = ErrorKind::Timeout {
                    missing,
                    waited: NOTICE_PATIENCE,
                };
                return Err(Error::new(Phase::Exchange, kind).with_peer(peer));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.counts.sent += 1;
        Ok(())
    }
}

/// A notice carries the rank its giver blamed in its size field: 0 for none, else the
/// rank plus one.
fn encode_blame(blames: Option<usize>) -> u64 {
    blames.map_or(0, |b| b as u64 + 1)
}

/// The rank a notice's size field blames ([`encode_blame`]), if any.
pub(super) fn decode_blame(encoded: u64) -> Option<usize> {
    encoded.checked_sub(1).and_then(|b| usize::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;
    use crate::exchange::PeerAddress;
    use symmwin_device::provider::Provider;

    const GROUP: u64 = 7;
    const SIZE: usize = 4096;

    /// Two endpoints of one process, as ranks 0 and 1, and each one's address.
    fn pair(dir: &std::path::Path) -> ([Endpoint; 2], Vec<PeerAddress>) {
        let endpoints = [0, 1].map(|label| Endpoint::bind(dir, label).unwrap());
        let peers = endpoints
            .iter()
            .map(|e| PeerAddress {
                socket: e.path().to_owned(),
                pid: std::process::id(),
                token: e.token(),
            })
            .collect();
        (endpoints, peers)
    }

    /// A peer's message for call 1 came during call 0, and its notice that it gave call 1
    /// up came only after call 0 returned: call 1 fails here instead of completing from
    /// the message of a call its sender abandoned.
    #[test]
    fn a_notice_behind_a_message_that_came_early_fails_the_call() {
        let dir = std::env::temp_dir().join(format!("symmwin-early-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ([mut ours, mut theirs], peers) = pair(&dir);
        let memory = symmwin_host::HostProvider::new().create(SIZE).unwrap();
        let handle = memory.export().unwrap();
        let round = |seq, rank, targets| Round {
            group: GROUP,
            seq,
            rank,
            peers: &peers,
            targets,
            physical_size: SIZE as u64,
        };
        let brief = Duration::from_millis(20);
        // Rank 1 sends its handles of calls 0 and 1 (nobody answers yet).
        for seq in [0, 1] {
            let sent = theirs.all_gather(&round(seq, 1, &[0]), &handle, brief);
            assert!(sent.unwrap_err().is_timeout());
        }
        let call_0 = ours.all_gather(&round(0, 0, &[1]), &handle, Duration::from_secs(5));
        assert!(call_0.is_ok(), "{call_0:?}");
        let notice = GaveUp {
            seq: 1,
            rank: 1,
            blames: None,
        };
        theirs.tell_give_up(GROUP, notice, &peers);
        let call_1 = ours.all_gather(&round(1, 0, &[1]), &handle, Duration::from_secs(5));
        let error = call_1.expect_err("call 1 completed from an abandoned call's message");
        assert!(
            matches!(
                error.kind(),
                ErrorKind::OutOfStep {
                    since: 1,
                    rank: 1,
                    ..
                }
            ),
            "{error}"
        );
        drop((ours, theirs));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
