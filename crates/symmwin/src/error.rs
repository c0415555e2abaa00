//! Errors carry who failed (rank), where (phase) and, when a peer is involved, which peer.

use std::fmt;
use std::time::Duration;

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

/// What went wrong, without the rank/phase/peer context.
#[derive(Debug, thiserror::Error)]
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
    #[error("timed out after {waited:?} waiting for rank(s) {missing:?}")]
    Timeout {
        /// Ranks that never answered.
        missing: Vec<usize>,
        /// How long this rank waited.
        waited: Duration,
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
    /// The requested configuration cannot be honoured (e.g. fabric handles without IMEX).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A device-side wait timed out and its kernel trapped: the CUDA context is lost and
    /// the process must exit. Reported by every later call that reaches the device.
    #[error("{0}")]
    ContextLost(Box<crate::device_timeout::DeviceTimeout>),
}

/// An error with the context needed to act on it in a multi-process job.
#[derive(Debug, thiserror::Error)]
pub struct Error {
    /// Rank of the process that reports the error, if it belongs to a group.
    pub rank: Option<usize>,
    /// Protocol step.
    pub phase: Phase,
    /// Peer involved, if any.
    pub peer: Option<usize>,
    /// What went wrong.
    #[source]
    pub kind: ErrorKind,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("symmwin")?;
        if let Some(rank) = self.rank {
            write!(f, " rank {rank}")?;
        }
        write!(f, " [{}]", self.phase)?;
        if let Some(peer) = self.peer {
            write!(f, " peer {peer}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl Error {
    /// An error outside any group.
    pub fn new(phase: Phase, kind: ErrorKind) -> Self {
        Error {
            rank: None,
            phase,
            peer: None,
            kind,
        }
    }

    /// Attach the reporting rank.
    pub fn at_rank(mut self, rank: usize) -> Self {
        self.rank.get_or_insert(rank);
        self
    }

    /// Attach the peer involved.
    pub fn with_peer(mut self, peer: usize) -> Self {
        self.peer = Some(peer);
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

    /// True when the error is a timeout waiting for peers.
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout { .. })
    }

    /// True when a device-side wait timed out earlier and trapped: nothing on the device
    /// works any more in this process, which must exit.
    pub fn is_context_lost(&self) -> bool {
        matches!(self.kind, ErrorKind::ContextLost(_))
    }
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
