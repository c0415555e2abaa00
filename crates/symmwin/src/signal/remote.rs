//! Signals and transfers to peers a window cannot map (another host): they go through
//! the group's own process-group backend, which the adapter supplies as a
//! [`RemotePeers`] (gloo for host memory, NCCL for CUDA memory in the torch adapter).
//! symmwin never builds a network transport of its own.
//!
//! A barrier over a group that spans hosts signals the mapped peers through the pads
//! (exactly as on one host, with the same `timeout`), then exchanges one flag message
//! with every unmapped peer. `put_signal` / `wait_signal` to an unmapped peer are a
//! matched send / receive of one flag: every put must be met by one wait on the peer,
//! as with pads.

use std::time::{Duration, Instant};

use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{PadLayout, PadSignal, SignalAt, Signals, StreamHandle};

/// Which way a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From this rank to the peer.
    Send,
    /// From the peer to this rank.
    Recv,
}

/// One flag message (no payload the caller sees) of a signal operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// Group rank of the peer.
    pub peer: usize,
    /// Send or receive.
    pub direction: Direction,
    /// Message tag; both sides use the same one (backends without tags ignore it).
    pub tag: u32,
}

/// One data transfer of a device operation (the ops across hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Group rank of the peer.
    pub peer: usize,
    /// Send or receive.
    pub direction: Direction,
    /// Address of the bytes (device memory for CUDA windows, host memory otherwise).
    pub ptr: usize,
    /// Number of bytes.
    pub len: usize,
    /// Message tag, as for [`Flag::tag`].
    pub tag: u32,
}

/// Why a remote operation failed, as the backend saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFailure {
    /// The peer the failing message was for, when known.
    pub peer: Option<usize>,
    /// True when the backend gave up waiting (rather than losing the connection).
    pub timed_out: bool,
    /// The backend's own message.
    pub message: String,
    /// For a timeout: the other peers the same wait timed out on (a live peer may be
    /// late only because it waits for one of them), so that the error names them all.
    pub also_waited_for: Vec<usize>,
}

/// The group's process-group backend, for peers that are not mapped.
///
/// Ranks are group ranks. On CUDA windows every message is ordered on `stream` (the
/// caller's current stream) and may still be in flight on return; on host windows the
/// receives have completed on return. A backend may not honour `timeout` on the device
/// (NCCL point-to-point has none: its own watchdog catches a dead peer).
pub trait RemotePeers: Send + Sync {
    /// Post every flag of one operation together. Sends may complete after return;
    /// the backend owns their buffers and reports a send that failed later at its
    /// next call (an empty batch only collects such a report).
    fn flags(
        &self,
        flags: &[Flag],
        timeout: Duration,
        stream: StreamHandle,
    ) -> std::result::Result<(), RemoteFailure>;

    /// Run every transfer of one operation together (one batch, so sends and receives
    /// between the same two ranks cannot deadlock). The caller keeps the buffers alive
    /// until the work is complete (on return for host memory; on `stream` otherwise).
    fn transfer(
        &self,
        transfers: &[Transfer],
        timeout: Duration,
        stream: StreamHandle,
    ) -> std::result::Result<(), RemoteFailure>;
}

/// The first tag of op data ([`data_tag`]); flags of signal operations stay below it,
/// so an op's messages and a concurrent signal never take each other's place.
const DATA_TAGS: u32 = 1 << 24;

/// Tag of barrier flags on `channel`; signal flags use the odd tags, so a barrier and
/// a put_signal on one channel never take each other's messages.
fn tag(channel: usize, signal: bool) -> Result<u32> {
    channel
        .checked_mul(2)
        .and_then(|t| t.checked_add(usize::from(signal)))
        .and_then(|t| u32::try_from(t).ok())
        .filter(|&t| t < DATA_TAGS)
        .ok_or_else(|| Error::invalid(format!("channel {channel} is too large")))
}

/// Tag of the `index`-th message one rank sends another within one op across hosts.
/// Both sides count the messages of the pair in the same order, so every receive
/// names exactly the send it matches, whatever order the backend delivers them in.
pub(crate) fn data_tag(index: usize) -> Result<u32> {
    u32::try_from(index)
        .ok()
        .and_then(|i| DATA_TAGS.checked_add(i))
        .filter(|&t| t <= i32::MAX as u32)
        .ok_or_else(|| Error::invalid(format!("{index} messages to one peer in one op")))
}

/// Turn a backend failure into an error naming the peer.
pub(crate) fn failure(f: RemoteFailure, waited: Duration) -> Error {
    let kind = match (f.timed_out, f.peer) {
        (true, Some(peer)) => ErrorKind::Timeout {
            missing: std::iter::once(peer).chain(f.also_waited_for).collect(),
            waited,
        },
        (_, Some(peer)) => ErrorKind::PeerLost(format!(
            "rank {peer} (on another host) through the process group: {}",
            f.message
        )),
        (_, None) => ErrorKind::PeerLost(format!(
            "a rank on another host, through the process group: {}",
            f.message
        )),
    };
    let error = Error::new(Phase::Signal, kind);
    match f.peer {
        Some(peer) => error.with_peer(peer),
        None => error,
    }
}

/// The first lost peer among `results` (the likeliest cause of the others), else the
/// first error.
fn first_cause<const N: usize>(results: [Result<()>; N]) -> Result<()> {
    let mut errors: Vec<Error> = results.into_iter().filter_map(|r| r.err()).collect();
    let lost = errors
        .iter()
        .position(|e| matches!(e.kind(), ErrorKind::PeerLost(_)));
    match (lost, errors.is_empty()) {
        (_, true) => Ok(()),
        (Some(i), _) => Err(errors.swap_remove(i)),
        (None, _) => Err(errors.swap_remove(0)),
    }
}

/// The time left of `timeout` counted from now, each time it is called.
fn countdown(timeout: Duration) -> impl Fn() -> Duration {
    let deadline = Instant::now() + timeout;
    move || deadline.saturating_duration_since(Instant::now())
}

/// The window's view of its group for a signal operation.
pub(crate) struct SignalScope<'a> {
    pub(crate) signals: &'a dyn Signals,
    pub(crate) pads: &'a PadLayout,
    pub(crate) mapped: &'a [bool],
    pub(crate) remote: Option<&'a dyn RemotePeers>,
    pub(crate) group: &'a str,
    /// Device memory: signal work is ordered on a stream, not done on return.
    pub(crate) stream_ordered: bool,
}

impl<'a> SignalScope<'a> {
    /// The backend that reaches unmapped `peer`; an error naming it when there is none.
    pub(crate) fn remote_for(&self, peer: usize) -> Result<&'a dyn RemotePeers> {
        self.remote.ok_or_else(|| {
            Error::new(
                Phase::Signal,
                ErrorKind::Unsupported(format!(
                    "rank {peer} is not mapped (another host) and group {} has no \
                     process-group backend to reach it",
                    self.group
                )),
            )
            .with_peer(peer)
        })
    }

    /// Barrier: pads with the mapped peers, one flag each way with the others.
    ///
    /// On host memory the flags to unmapped peers are posted before the pad barrier
    /// and received after it, so a peer stuck on its own pads (waiting for a dead
    /// neighbour) has still sent us its flag, and the rank named on failure is the one
    /// whose connection died. On device memory the sends and receives go in one batch
    /// after the pad barrier (NCCL needs the two directions of a pair grouped).
    pub(crate) fn barrier(&self, at: SignalAt) -> Result<()> {
        let SignalAt {
            channel,
            timeout,
            stream,
            ..
        } = at;
        let left = countdown(timeout);
        let remote: Vec<usize> = (0..self.mapped.len())
            .filter(|&p| !self.mapped[p])
            .collect();
        let backend = match remote.first() {
            Some(&first) => Some(self.remote_for(first)?),
            None => None,
        };
        let tag = tag(channel, false)?;
        let flags = |direction| -> Vec<Flag> {
            remote
                .iter()
                .map(|&peer| Flag {
                    peer,
                    direction,
                    tag,
                })
                .collect()
        };
        let post = |flags: Vec<Flag>| match backend {
            Some(b) if !flags.is_empty() => b
                .flags(&flags, left(), stream)
                .map_err(|f| failure(f, timeout)),
            _ => Ok(()),
        };
        if self.stream_ordered {
            self.local_barrier(channel, &left, stream)?;
            let mut both = flags(Direction::Send);
            both.extend(flags(Direction::Recv));
            return post(both);
        }
        // A failed send (a dead peer) is reported only after this rank took its part
        // in the pad barrier: leaving early would make the local peers time out naming
        // us instead of the dead rank.
        let sent = post(flags(Direction::Send));
        if let Err(local) = self.local_barrier(channel, &left, stream) {
            // A local peer that never came may have left after seeing a remote rank
            // die: a lost connection the backend recorded meanwhile names the cause.
            let recorded = backend.map_or(Ok(()), |b| {
                b.flags(&[], Duration::ZERO, stream)
                    .map_err(|f| failure(f, timeout))
            });
            return first_cause([sent, recorded, Err(local)]);
        }
        let received = post(flags(Direction::Recv));
        first_cause([sent, received])
    }

    /// Barrier among the mapped ranks only (this host's), through the pads.
    pub(crate) fn mapped_barrier(&self, at: SignalAt) -> Result<()> {
        self.local_barrier(at.channel, &countdown(at.timeout), at.stream)
    }

    /// Signal and wait for every mapped peer through the pads.
    fn local_barrier(
        &self,
        channel: usize,
        left: &dyn Fn() -> Duration,
        stream: StreamHandle,
    ) -> Result<()> {
        let me = self.pads.rank();
        // Signal every mapped peer, then wait for every one.
        let signal_then_wait: [fn(usize) -> PadSignal; 2] = [PadSignal::Put, PadSignal::Wait];
        for op in signal_then_wait {
            for peer in (0..self.mapped.len()).filter(|&p| p != me && self.mapped[p]) {
                let at = SignalAt::new(channel, left(), stream);
                self.signals.signal(self.pads, op(peer), at)?;
            }
        }
        Ok(())
    }

    /// One flag to or from an unmapped `peer`.
    pub(crate) fn remote_signal(
        &self,
        peer: usize,
        direction: Direction,
        channel: usize,
        timeout: Duration,
        stream: StreamHandle,
    ) -> Result<()> {
        self.pads.check_peer(peer)?;
        // The channel must fit the pad as for a mapped peer: the same call must not
        // be valid for one peer and not for another.
        self.pads.slot_offset(channel, peer)?;
        let flag = Flag {
            peer,
            direction,
            tag: tag(channel, true)?,
        };
        self.remote_for(peer)?
            .flags(&[flag], timeout, stream)
            .map_err(|f| failure(f, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_and_signal_tags_never_collide() {
        let mut seen = std::collections::HashSet::new();
        for channel in 0..100 {
            assert!(seen.insert(tag(channel, false).unwrap()));
            assert!(seen.insert(tag(channel, true).unwrap()));
        }
        assert!(tag(usize::MAX / 2, true).is_err());
        for index in [0, 1, 1000] {
            assert!(!seen.contains(&data_tag(index).unwrap()));
        }
        assert!(tag(DATA_TAGS as usize / 2, false).is_err());
        assert!(data_tag(usize::MAX).is_err());
    }

    #[test]
    fn a_lost_peer_is_the_cause_reported() {
        let timeout = || {
            Err(Error::new(
                Phase::Signal,
                ErrorKind::Timeout {
                    missing: vec![0],
                    waited: Duration::ZERO,
                },
            ))
        };
        let lost = || {
            Err(failure(
                RemoteFailure {
                    peer: Some(3),
                    timed_out: false,
                    message: "reset".into(),
                    also_waited_for: Vec::new(),
                },
                Duration::ZERO,
            ))
        };
        assert_eq!(
            first_cause([Ok(()), timeout(), lost()]).unwrap_err().peer(),
            Some(3)
        );
        assert!(first_cause([timeout(), Ok(())]).unwrap_err().is_timeout());
        assert!(first_cause([Ok(()), Ok(())]).is_ok());
    }

    #[test]
    fn failures_name_the_peer() {
        let lost = failure(
            RemoteFailure {
                peer: Some(3),
                timed_out: false,
                message: "Connection closed by peer".into(),
                also_waited_for: Vec::new(),
            },
            Duration::from_secs(1),
        );
        assert_eq!(lost.peer(), Some(3));
        assert!(lost.to_string().contains("rank 3"), "{lost}");
        let late = failure(
            RemoteFailure {
                peer: Some(2),
                timed_out: true,
                message: String::new(),
                also_waited_for: Vec::new(),
            },
            Duration::from_secs(1),
        );
        assert!(late.is_timeout());
        assert!(late.to_string().contains("[2]"), "{late}");
    }
}
