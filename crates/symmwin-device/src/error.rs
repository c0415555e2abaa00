//! Errors carry who failed (rank), where (phase) and, when a peer is involved, which peer.

use std::fmt;
use std::time::Duration;

use crate::poison::{Poison, PoisonCause, MAX_WAITED, REMEDY};
use crate::text::Seconds;

/// The step of the protocol during which an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Probing devices and handle types.
    Probe,
    /// Creating local physical memory.
    Create,
    /// Exporting a shareable handle.
    Export,
    /// Publishing this rank's request to the store.
    Publish,
    /// Waiting for and validating every rank's request.
    Gather,
    /// Sending and receiving handles over the Unix socket.
    Exchange,
    /// Importing a peer's handle.
    Import,
    /// Reserving the span and mapping memory into it.
    Map,
    /// Barrier, put_signal or wait_signal.
    Signal,
    /// Unmapping and releasing.
    Teardown,
    /// Checking a caller's arguments.
    Argument,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Phase::Probe => "probe",
            Phase::Create => "create",
            Phase::Export => "export",
            Phase::Publish => "publish",
            Phase::Gather => "gather",
            Phase::Exchange => "exchange",
            Phase::Import => "import",
            Phase::Map => "map",
            Phase::Signal => "signal",
            Phase::Teardown => "teardown",
            Phase::Argument => "argument",
        };
        f.write_str(name)
    }
}

/// What went wrong, without the rank/phase/peer context. New kinds may be added:
/// match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The CUDA driver library could not be loaded or has no device.
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    /// A CUDA driver call failed.
    #[error("{call} failed: {name} ({message})")]
    Driver {
        /// The driver entry point, e.g. `cuMemCreate`.
        call: &'static str,
        /// The driver's error name, e.g. `CUDA_ERROR_NOT_PERMITTED`.
        name: String,
        /// The driver's error string.
        message: String,
    },
    /// An operating-system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The system call or operation.
        call: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Ranks asked for windows that do not agree.
    #[error("ranks disagree on {field}: {detail}")]
    Mismatch {
        /// The request field that differs, e.g. `size`.
        field: &'static str,
        /// Each distinct value with the ranks that hold it.
        detail: String,
    },
    /// Some ranks did not arrive in time.
    #[error(
        "timed out after {} waiting for rank(s) {}",
        Seconds(*.waited),
        crate::text::ranks(missing)
    )]
    Timeout {
        /// Ranks that never answered.
        missing: Vec<usize>,
        /// How long this rank waited.
        waited: Duration,
    },
    /// A local peer's process ended while this rank waited for it (its watched pid
    /// exited).
    #[error("rank {rank} (pid {pid}) {how} while this rank waited for it")]
    PeerExited {
        /// The peer's rank in the group.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// "exited", or its status or signal where this process is its parent.
        how: String,
    },
    /// A peer is gone (its socket refuses connections).
    #[error("peer is unreachable: {0}")]
    PeerLost(String),
    /// Something failed a security check (a socket directory, a received handle).
    #[error("refused: {0}")]
    Rejected(String),
    /// A store value could not be decoded.
    #[error("corrupt store value for key {key}: {detail}")]
    Corrupt {
        /// The store key.
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// The store failed.
    #[error("store error: {0}")]
    Store(String),
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An operating-system limit was hit; the message names it and how to raise it.
    #[error("resource limit: {0}")]
    Limit(String),
    /// The requested configuration cannot be honoured (e.g. fabric handles without IMEX).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A device-side wait timed out and its kernel trapped: the CUDA context is lost and
    /// the process must exit. Reported by every later call that reaches the device.
    #[error("{0}")]
    ContextLost(Box<crate::device_timeout::DeviceTimeout>),
    /// A rendezvous of this group failed or was given up on some rank, so the ranks no
    /// longer agree on which call is which: no later rendezvous of the group can be
    /// trusted to pair the same calls, and every one fails at once.
    #[error(
        "the group is out of step since rendezvous {since} on rank {rank} ({why}); no \
         rendezvous of this group can succeed any more: destroy and re-create the process \
         group (torch.distributed.destroy_process_group(), then init_process_group or \
         new_group; with the Rust API, a new Group under a new name)"
    )]
    OutOfStep {
        /// The rendezvous number (per group, from 0) that failed first.
        since: u64,
        /// The rank where it failed (this rank or the peer that told us).
        rank: usize,
        /// What happened there.
        why: String,
    },
    /// A host signal wait on this window ended without completing (on this rank or
    /// another), so its pads are out of step: every later call on the window fails at
    /// once, naming the call and rank that failed first.
    #[error(
        "this window is poisoned: {0}, which left its signal pads out of step between the \
         ranks, so no later call on it can be trusted to pair with its peers' same call; \
         {remedy}",
        remedy = REMEDY
    )]
    Poisoned(Box<Poison>),
    /// The caller interrupted the wait ([`crate::interrupt::request`], [`crate::interrupt::set_check`]; from Python, Ctrl-C).
    #[error("interrupted while waiting")]
    Interrupted,
    /// A bug inside symmwin: state it guards was left inconsistent (a lock poisoned by
    /// a panic on another thread).
    #[error("internal error: {0}")]
    Internal(String),
}

/// An error with the context needed to act on it in a multi-process job. Built with
/// [`Error::new`] and the `at_rank` / `with_peer` / `in_group` builders; read with the
/// accessors. One pointer wide, so every `Result` of the crate stays small to move.
pub struct Error(Box<Details>);

/// What an [`Error`] carries.
#[derive(Debug)]
struct Details {
    /// Rank of the process that reports the error, if it belongs to a group.
    rank: Option<usize>,
    /// Protocol step.
    phase: Phase,
    /// Peer involved, if any.
    peer: Option<usize>,
    /// What went wrong.
    kind: ErrorKind,
    /// The subgroup the ranks above belong to, when its ranks are not the global ones.
    group: Option<GroupLabel>,
    /// This failure poisoned its window (see [`ErrorKind::Poisoned`]): what it wrote.
    poisoned: Option<Poison>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.kind)
    }
}

/// Names a subgroup in an error, so group ranks can be told from global ranks.
#[derive(Debug, Clone)]
pub struct GroupLabel {
    /// Group name.
    pub name: String,
    /// Global rank of every group rank.
    pub global_ranks: std::sync::Arc<[i32]>,
}

impl GroupLabel {
    fn global(&self, rank: usize) -> String {
        self.global_ranks
            .get(rank)
            .map_or_else(|| "?".into(), |g| g.to_string())
    }

    /// The global ranks of `group_ranks`, bounded as [`crate::text::ranks`] bounds a list.
    fn globals(&self, group_ranks: &[usize]) -> String {
        let listed = group_ranks.len().min(crate::text::MAX_RANKS_LISTED);
        let mut out: Vec<String> = group_ranks[..listed]
            .iter()
            .map(|&r| self.global(r))
            .collect();
        if group_ranks.len() > listed {
            out.push(format!("... {} more", group_ranks.len() - listed));
        }
        format!("[{}]", out.join(", "))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("symmwin")?;
        let group = self.0.group.as_ref();
        if let Some(g) = group {
            write!(f, " group {:?}", g.name)?;
        }
        if let Some(rank) = self.0.rank {
            write!(f, " rank {rank}")?;
            if let Some(g) = group {
                write!(f, " (global rank {})", g.global(rank))?;
            }
        }
        write!(f, " [{}]", self.0.phase)?;
        if let Some(peer) = self.0.peer {
            write!(f, " peer {peer}")?;
            if let Some(g) = group {
                write!(f, " (global rank {})", g.global(peer))?;
            }
        }
        match (group, &self.0.kind) {
            (Some(g), ErrorKind::Timeout { missing, waited }) => write!(
                f,
                ": timed out after {} waiting for group rank(s) {} (global rank(s) {})",
                Seconds(*waited),
                crate::text::ranks(missing),
                g.globals(missing)
            ),
            (_, kind) => write!(f, ": {kind}"),
        }?;
        if self.0.poisoned.is_some() {
            write!(
                f,
                "; this left the window's signal pads out of step, so the window is now \
                 poisoned on every rank: {}",
                REMEDY
            )?;
        }
        Ok(())
    }
}

impl Error {
    /// An error outside any group.
    pub fn new(phase: Phase, kind: ErrorKind) -> Self {
        Error(Box::new(Details {
            rank: None,
            phase,
            peer: None,
            kind,
            group: None,
            poisoned: None,
        }))
    }

    /// Attach the subgroup whose ranks this error names (none for a group whose
    /// ranks are the global ranks: there the numbers already agree).
    pub fn in_group(mut self, name: &str, global_ranks: &[i32]) -> Self {
        let identity = global_ranks
            .iter()
            .enumerate()
            .all(|(r, &g)| usize::try_from(g) == Ok(r));
        if self.0.group.is_none() && !identity {
            self.0.group = Some(GroupLabel {
                name: name.to_owned(),
                global_ranks: global_ranks.into(),
            });
        }
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// What went wrong, to add detail a lower layer could not know.
    pub fn kind_mut(&mut self) -> &mut ErrorKind {
        &mut self.0.kind
    }

    /// What went wrong, taking the error apart.
    pub fn into_kind(self) -> ErrorKind {
        self.0.kind
    }

    /// The protocol step during which it happened.
    pub fn phase(&self) -> Phase {
        self.0.phase
    }

    /// Rank of the process that reports the error, if it belongs to a group.
    pub fn rank(&self) -> Option<usize> {
        self.0.rank
    }

    /// Peer involved, if any.
    pub fn peer(&self) -> Option<usize> {
        self.0.peer
    }

    /// The subgroup the ranks belong to, when its ranks are not the global ones.
    pub fn group(&self) -> Option<&GroupLabel> {
        self.0.group.as_ref()
    }

    /// Name the protocol step of an error raised by a layer that cannot know it (a
    /// store call serves both publish and gather).
    pub fn during(mut self, phase: Phase) -> Self {
        self.0.phase = phase;
        self
    }

    /// Attach the reporting rank.
    pub fn at_rank(mut self, rank: usize) -> Self {
        self.0.rank.get_or_insert(rank);
        self
    }

    /// Attach the peer involved.
    pub fn with_peer(mut self, peer: usize) -> Self {
        self.0.peer = Some(peer);
        self
    }

    /// Shorthand for an OS error.
    pub fn os(phase: Phase, call: &'static str, source: impl Into<std::io::Error>) -> Self {
        Error::new(
            phase,
            ErrorKind::Os {
                call,
                source: source.into(),
            },
        )
    }

    /// Shorthand for a bad argument.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(Phase::Argument, ErrorKind::InvalidArgument(message.into()))
    }

    /// Record that this failure poisoned its window.
    pub fn poisoning(mut self, poison: Poison) -> Self {
        self.0.poisoned = Some(poison);
        self
    }

    /// The poisoned window this error is about: the one its own failure poisoned, or
    /// the one a call was refused on ([`ErrorKind::Poisoned`]).
    pub fn poisoned_window(&self) -> Option<&Poison> {
        match &self.0.kind {
            ErrorKind::Poisoned(poison) => Some(poison),
            _ => self.0.poisoned.as_ref(),
        }
    }

    /// True when the error is a timeout waiting for peers.
    pub fn is_timeout(&self) -> bool {
        matches!(self.0.kind, ErrorKind::Timeout { .. })
    }

    /// True when a device-side wait timed out earlier and trapped: nothing on the device
    /// works any more in this process, which must exit.
    pub fn is_context_lost(&self) -> bool {
        matches!(self.0.kind, ErrorKind::ContextLost(_))
    }

    /// Why this error ended a wait early, if it did: only such errors poison a window.
    fn poison_cause(&self) -> Option<PoisonCause> {
        match self.0.kind {
            ErrorKind::Timeout { .. } => Some(PoisonCause::Timeout),
            ErrorKind::Interrupted => Some(PoisonCause::Interrupted),
            ErrorKind::PeerExited { .. } => Some(PoisonCause::PeerExited),
            ErrorKind::PeerLost(_) => Some(PoisonCause::PeerLost),
            _ => None,
        }
    }

    /// The poison record of `call` on `channel`, whose wait on `rank` ended with this
    /// error, if this error is one that ends a wait early. A departed peer comes first
    /// among the ranks waited for.
    pub fn poison_record(&self, call: &'static str, channel: usize, rank: usize) -> Option<Poison> {
        let cause = self.poison_cause()?;
        let mut waited_for: Vec<usize> = match &self.0.kind {
            ErrorKind::Timeout { missing, .. } => missing.clone(),
            ErrorKind::PeerExited { rank, .. } => vec![*rank],
            _ => Vec::new(),
        };
        if let Some(peer) = self.peer() {
            if !waited_for.contains(&peer) {
                waited_for.insert(0, peer);
            }
        }
        waited_for.truncate(MAX_WAITED);
        Some(Poison {
            call,
            channel,
            rank,
            cause,
            waited_for,
        })
    }
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_people_write_them() {
        let shown = |ms: u64| Seconds(Duration::from_millis(ms)).to_string();
        assert_eq!(shown(2000), "2.0 s");
        assert_eq!(shown(250), "0.25 s");
        assert_eq!(shown(999), "1.0 s");
        assert_eq!(shown(50), "0.05 s");
        assert_eq!(shown(0), "0.0 s");
    }

    #[test]
    fn only_a_wait_that_ended_early_poisons() {
        let timeout = Error::new(
            Phase::Signal,
            ErrorKind::Timeout {
                missing: vec![2],
                waited: Duration::from_secs(1),
            },
        )
        .with_peer(2);
        let poison = timeout.poison_record("barrier", 0, 1).unwrap();
        assert_eq!(poison.waited_for, vec![2]);
        assert!(poison
            .to_string()
            .contains("barrier on channel 0 timed out on rank 1"));
        let interrupted = Error::new(Phase::Signal, ErrorKind::Interrupted);
        assert_eq!(
            interrupted
                .poison_record("broadcast", 3, 0)
                .map(|p| p.cause),
            Some(PoisonCause::Interrupted)
        );
        let bad = Error::invalid("channel 99 does not fit");
        assert_eq!(bad.poison_record("barrier", 99, 0), None);
        let mismatch = Error::new(
            Phase::Signal,
            ErrorKind::Mismatch {
                field: "op",
                detail: String::new(),
            },
        );
        assert_eq!(mismatch.poison_record("all_to_all", 0, 0), None);
    }
}
