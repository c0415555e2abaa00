//! Dead-peer diagnosis: which of several unreachable peers most likely caused a
//! failed exchange.

use std::path::Path;

use super::Round;
use symmwin_device::error::{Error, ErrorKind};

/// Of the peers a send failed for, the one most likely to be the cause. After a death
/// the first survivors to notice fail and leave, so later ones find several peers
/// unreachable: prefer a peer whose socket is still there (died without cleaning up),
/// then one whose process is gone, over one that removed its socket and lives on
/// (gave up after its own error). The others are listed in the message.
pub(super) fn most_likely_lost(round: &Round<'_>, mut lost: Vec<(usize, Error)>) -> Error {
    let score = |peer: usize| {
        let address = &round.peers[peer];
        let alive = rustix::process::Pid::from_raw(address.pid as i32)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        2 * u8::from(address.socket.exists()) + u8::from(!alive)
    };
    let scores: Vec<u8> = lost.iter().map(|(peer, _)| score(*peer)).collect();
    let best = (0..lost.len())
        .max_by_key(|&i| (scores[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    let (_, mut error) = lost.swap_remove(best);
    if !lost.is_empty() {
        let mut others: Vec<usize> = lost.iter().map(|(peer, _)| *peer).collect();
        others.sort_unstable();
        if let ErrorKind::PeerLost(message) = error.kind_mut() {
            message.push_str(&format!(" (also unreachable: rank(s) {others:?})"));
        }
    }
    error
}

/// A path from a peer's request, bounded for an error message.
pub(super) fn shown(path: &Path) -> String {
    symmwin_device::text::clip(&path.display().to_string())
}
