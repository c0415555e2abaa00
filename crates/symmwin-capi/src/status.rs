//! The status every entry point returns, and the error kind each stands for.

use symmwin::ErrorKind;

use SymmwinStatus::*;

/// Result of every call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymmwinStatus {
    /// Success.
    SymmwinOk = 0,
    /// The pointer is not a symmwin allocation (not an error for `rendezvous`).
    SymmwinNotFound = 1,
    /// A bad argument; see the last error.
    SymmwinInvalidArgument = 2,
    /// Peers did not arrive in time.
    SymmwinTimeout = 3,
    /// Ranks disagree (sizes, devices, ...).
    SymmwinMismatch = 4,
    /// A peer process is gone.
    SymmwinPeerLost = 5,
    /// No CUDA driver or device.
    SymmwinNoDriver = 6,
    /// Any other failure; see the last error.
    SymmwinError = 7,
    /// A bug: a panic was caught at the boundary.
    SymmwinPanic = 8,
    /// A device-side wait timed out and trapped: the CUDA context is lost and the
    /// process must exit. The last error names the op, channel and peers.
    SymmwinContextLost = 9,
    /// A host wait was interrupted (`symmwin_set_interrupt_check`'s hook said so).
    SymmwinInterrupted = 10,
}

pub(crate) fn status_of(err: &symmwin::Error) -> SymmwinStatus {
    match err.kind() {
        ErrorKind::InvalidArgument(_) => SymmwinInvalidArgument,
        ErrorKind::Timeout { .. } => SymmwinTimeout,
        ErrorKind::Mismatch { .. } => SymmwinMismatch,
        ErrorKind::PeerLost(_) => SymmwinPeerLost,
        ErrorKind::NoDriver(_) => SymmwinNoDriver,
        ErrorKind::ContextLost(_) => SymmwinContextLost,
        ErrorKind::Interrupted => SymmwinInterrupted,
        _ => SymmwinError,
    }
}
