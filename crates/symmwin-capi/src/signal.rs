//! The window's pad signals through the C ABI: one entry point for the barrier, the
//! put and the wait, as the core has one signal operation.

use std::ffi::{c_int, c_void};

use crate::{channel_arg, guard, rank_arg, signal_options, window_arg};
use crate::{SymmwinStatus, SymmwinWindow};

/// `symmwin_window_signal`: signal every rank, then wait for every rank (`peer` is not
/// read).
pub const SYMMWIN_SIGNAL_BARRIER: c_int = 0;
/// `symmwin_window_signal`: signal rank `peer`.
pub const SYMMWIN_SIGNAL_PUT: c_int = 1;
/// `symmwin_window_signal`: wait for rank `peer`'s signal.
pub const SYMMWIN_SIGNAL_WAIT: c_int = 2;

/// One signal operation `op` (`SYMMWIN_SIGNAL_BARRIER`, `SYMMWIN_SIGNAL_PUT` or
/// `SYMMWIN_SIGNAL_WAIT`; any other value is `SYMMWIN_INVALID_ARGUMENT`) with `peer`
/// on `channel`, ordered on CUDA `stream` (ignored for host memory). `timeout_ms` 0
/// uses the group's timeout on the host (`SYMMWIN_TIMEOUT_MS` when set, else the
/// process group's, see `symmwin_group_init`) and on the device `SYMMWIN_TIMEOUT_MS`,
/// else 60 s. On the device a wait that runs out traps: the stream's next
/// synchronization fails and every later call returns `SYMMWIN_CONTEXT_LOST`.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `stream` is NULL or a CUDA stream of the window's device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_signal(
    w: *const SymmwinWindow,
    op: c_int,
    peer: i64,
    channel: c_int,
    timeout_ms: u64,
    stream: *mut c_void,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let window = &unsafe { window_arg(w) }?.window;
        let options = signal_options(channel_arg(channel)?, timeout_ms, stream);
        match op {
            SYMMWIN_SIGNAL_BARRIER => window.barrier(options),
            SYMMWIN_SIGNAL_PUT => {
                window.put_signal(rank_arg(peer, window.world(), "peer")?, options)
            }
            SYMMWIN_SIGNAL_WAIT => {
                window.wait_signal(rank_arg(peer, window.world(), "peer")?, options)
            }
            other => Err(symmwin::Error::invalid(format!(
                "unknown signal operation {other} (SYMMWIN_SIGNAL_BARRIER, SYMMWIN_SIGNAL_PUT \
                 or SYMMWIN_SIGNAL_WAIT)"
            ))),
        }?;
        Ok(SymmwinStatus::SymmwinOk)
    })
}
