//! What a device-side wait that timed out left behind, and why the process must exit.
//!
//! A kernel whose wait for a peer times out records the facts in host-mapped memory and
//! traps (`kernels/wait.cuh`). The trap makes the stream's next synchronization fail, as
//! torch's SymmetricMemory contract requires, and it loses the CUDA context for good:
//! every later CUDA call of the process fails. symmwin's next call reports this record
//! instead of a generic driver error. A wait for a peer whose process ended (marked by
//! the host's peer watcher, `peer_watch.rs`) ends the same way, naming that peer.

use std::fmt;
use std::time::Duration;

use crate::text::Seconds;

/// Default limit of a device-side wait (barrier, put_signal, wait_signal, device ops)
/// given none, when `SYMMWIN_TIMEOUT_MS` is not set.
pub const DEFAULT_DEVICE_TIMEOUT: Duration = Duration::from_secs(60);

/// A device-side wait that ran past its limit, or whose peer ended; the kernel trapped
/// afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTimeout {
    /// `Some` when the wait ended because the peer `missing[0]` ended (its pid and how),
    /// not because the limit passed.
    pub exited: Option<crate::peer_exit::PeerExit>,
    /// The operation that waited: `barrier`, `put_signal`, `wait_signal`, or a device op.
    pub op: &'static str,
    /// The signal channel it waited on.
    pub channel: u32,
    /// The rank that waited (this process).
    pub rank: usize,
    /// The ranks it waited for that did not answer (the first ones, when many).
    pub missing: Vec<usize>,
    /// Late ranks beyond those listed in `missing`.
    pub unlisted: usize,
    /// How long the longest late wait lasted.
    pub waited: Duration,
    /// The limit it was given.
    pub limit: Duration,
}

impl fmt::Display for DeviceTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(exit), Some(peer)) = (&self.exited, self.missing.first()) {
            write!(
                f,
                "device {}: rank {peer} (pid {}) {} while rank {} waited for it on channel {} \
                 (after {})",
                self.op,
                exit.pid,
                exit.how,
                self.rank,
                self.channel,
                Seconds(self.waited)
            )?;
            return f.write_str(LOST);
        }
        write!(
            f,
            "device {} on channel {} timed out after {} (limit {}) waiting for rank(s) {:?}",
            self.op,
            self.channel,
            Seconds(self.waited),
            Seconds(self.limit),
            self.missing
        )?;
        if self.unlisted > 0 {
            write!(f, " and {} more", self.unlisted)?;
        }
        f.write_str(LOST)
    }
}

const LOST: &str = "; the kernel trapped, so this process's CUDA context is lost: every later \
                    CUDA call fails, and the process must exit (os._exit in Python) and be \
                    restarted";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_every_fact_and_says_to_exit() {
        let t = DeviceTimeout {
            exited: None,
            op: "barrier",
            channel: 1,
            rank: 0,
            missing: vec![2, 3],
            unlisted: 4,
            waited: Duration::from_micros(5_000_100),
            limit: Duration::from_secs(5),
        };
        let text = t.to_string();
        assert!(text.starts_with("device barrier on channel 1 timed out after 5.0 s (limit 5.0 s) waiting for rank(s) [2, 3] and 4 more;"), "{text}");
        assert!(
            text.contains("CUDA context is lost") && text.contains("must exit"),
            "{text}"
        );
    }
}
