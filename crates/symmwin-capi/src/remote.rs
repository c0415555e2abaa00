//! The group's process-group backend as C callbacks (torch's c10d ProcessGroup,
//! through the adapter): how windows reach peers they cannot map (other hosts).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use symmwin::{Direction, Flag, RemoteFailure, RemotePeers, Transfer};

/// `SymmwinFlag::direction` / `SymmwinTransfer::direction`: from us to the peer.
pub const SYMMWIN_SEND: c_int = 0;
/// `SymmwinFlag::direction` / `SymmwinTransfer::direction`: from the peer to us.
pub const SYMMWIN_RECV: c_int = 1;

/// One flag message of a signal operation (the callee owns the 4-byte buffers).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SymmwinFlag {
    /// Group rank of the peer.
    pub peer: c_int,
    /// `SYMMWIN_SEND` or `SYMMWIN_RECV`.
    pub direction: c_int,
    /// Message tag, the same on both sides.
    pub tag: c_int,
}

/// One data transfer of a device operation (the caller owns the buffer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SymmwinTransfer {
    /// Group rank of the peer.
    pub peer: c_int,
    /// `SYMMWIN_SEND` or `SYMMWIN_RECV`.
    pub direction: c_int,
    /// Message tag, the same on both sides.
    pub tag: c_int,
    /// The bytes (device memory of the window's device, or host memory).
    pub ptr: *mut c_void,
    /// Number of bytes.
    pub len: usize,
}

/// What a failing callback reports.
#[repr(C)]
pub struct SymmwinRemoteError {
    /// Group rank of the peer whose message failed, -1 when unknown.
    pub peer: c_int,
    /// Non-zero when the backend gave up waiting rather than losing the peer.
    pub timed_out: c_int,
    /// The backend's message, NUL-terminated.
    pub message: [c_char; 512],
}

/// The shape of both batch callbacks of [`SymmwinRemote`].
type BatchFn<T> = unsafe extern "C" fn(
    *mut c_void,
    *const T,
    usize,
    u64,
    *mut c_void,
    *mut SymmwinRemoteError,
) -> c_int;

/// Process-group callbacks for peers that are not mapped. Called from the thread
/// that calls the window operation; `release` is called once, last.
///
/// `flags`: post every send (it may complete after return; a later failure of it is
/// reported by the next call, and a call with `n == 0` only collects such a report)
/// and complete every receive (host memory: before return; CUDA: ordered on `stream`).
/// `transfer`: run every send and receive as one batch, complete before return (host)
/// or ordered on `stream` (CUDA).
#[repr(C)]
pub struct SymmwinRemote {
    /// Passed back to every callback.
    pub ctx: *mut c_void,
    /// Flag messages of barrier / put_signal / wait_signal: `ops[0..n]`, the wait
    /// bound, the CUDA stream (NULL for host memory) and where to report a failure.
    /// Returns 0 on success.
    pub flags: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            ops: *const SymmwinFlag,
            n: usize,
            timeout_ms: u64,
            stream: *mut c_void,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Data transfers of device operations, called as `flags` is.
    pub transfer: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            ops: *const SymmwinTransfer,
            n: usize,
            timeout_ms: u64,
            stream: *mut c_void,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Free `ctx`.
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

pub(crate) struct CallbackRemote(SymmwinRemote);

// SAFETY: the adapter's contract (SymmwinRemote doc) is that the callbacks may be used
// from any thread that calls a window operation; c10d process groups are thread-safe.
unsafe impl Send for CallbackRemote {}
// SAFETY: as above.
unsafe impl Sync for CallbackRemote {}

impl CallbackRemote {
    pub(crate) fn new(remote: SymmwinRemote) -> Self {
        CallbackRemote(remote)
    }
}

impl Drop for CallbackRemote {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: release is called exactly once, after the last use of ctx.
            unsafe { release(self.0.ctx) }
        }
    }
}

fn direction(d: Direction) -> c_int {
    match d {
        Direction::Send => SYMMWIN_SEND,
        Direction::Recv => SYMMWIN_RECV,
    }
}

fn failed(message: String) -> RemoteFailure {
    RemoteFailure {
        peer: None,
        timed_out: false,
        message,
    }
}

fn rank(peer: usize) -> Result<c_int, RemoteFailure> {
    c_int::try_from(peer).map_err(|_| failed(format!("rank {peer} does not fit a C int")))
}

fn tag(tag: u32) -> Result<c_int, RemoteFailure> {
    c_int::try_from(tag).map_err(|_| failed(format!("tag {tag} does not fit a C int")))
}

/// Call one batch callback and turn its report into a [`RemoteFailure`].
fn call<T>(
    ctx: *mut c_void,
    f: Option<BatchFn<T>>,
    what: &str,
    ops: &[T],
    timeout: Duration,
    stream: usize,
) -> Result<(), RemoteFailure> {
    let f = f.ok_or_else(|| failed(format!("process-group callback {what} is NULL")))?;
    let mut error = SymmwinRemoteError {
        peer: -1,
        timed_out: 0,
        message: [0; 512],
    };
    let timeout_ms = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    // SAFETY: the SymmwinRemote contract; `ops` and `error` outlive the call.
    let rc = unsafe {
        f(
            ctx,
            ops.as_ptr(),
            ops.len(),
            timeout_ms,
            stream as *mut c_void,
            &mut error,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    error.message[511] = 0;
    // SAFETY: the buffer is NUL-terminated (forced above).
    let message = unsafe { CStr::from_ptr(error.message.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Err(RemoteFailure {
        peer: usize::try_from(error.peer).ok(),
        timed_out: error.timed_out != 0,
        message,
    })
}

impl RemotePeers for CallbackRemote {
    fn flags(&self, flags: &[Flag], timeout: Duration, stream: usize) -> Result<(), RemoteFailure> {
        let ops = flags
            .iter()
            .map(|f| {
                Ok(SymmwinFlag {
                    peer: rank(f.peer)?,
                    direction: direction(f.direction),
                    tag: tag(f.tag)?,
                })
            })
            .collect::<Result<Vec<_>, RemoteFailure>>()?;
        call(self.0.ctx, self.0.flags, "flags", &ops, timeout, stream)
    }

    fn transfer(
        &self,
        transfers: &[Transfer],
        timeout: Duration,
        stream: usize,
    ) -> Result<(), RemoteFailure> {
        let ops = transfers
            .iter()
            .map(|t| {
                Ok(SymmwinTransfer {
                    peer: rank(t.peer)?,
                    direction: direction(t.direction),
                    tag: tag(t.tag)?,
                    ptr: t.ptr as *mut c_void,
                    len: t.len,
                })
            })
            .collect::<Result<Vec<_>, RemoteFailure>>()?;
        call(
            self.0.ctx,
            self.0.transfer,
            "transfer",
            &ops,
            timeout,
            stream,
        )
    }
}

/// Reach the peers that windows of group `name` on `device` cannot map through
/// `remote` (the group's process group). Takes ownership of `remote` in every case.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string. `remote` holds callbacks that honour the
/// `SymmwinRemote` contract.
#[no_mangle]
pub unsafe extern "C" fn symmwin_group_set_remote(
    name: *const c_char,
    device: c_int,
    remote: SymmwinRemote,
) -> crate::SymmwinStatus {
    let remote = CallbackRemote::new(remote);
    crate::guard(move || {
        // SAFETY: as for every string argument.
        let name = unsafe { crate::str_arg(name, "group name") }?;
        let group = crate::REGISTRY.group(name, device).ok_or_else(|| {
            symmwin::Error::invalid(format!("group {name} is not registered on device {device}"))
        })?;
        group.set_remote_peers(Arc::new(remote));
        Ok(crate::SymmwinStatus::SymmwinOk)
    })
}

/// Write 1 into `out[r]` for every rank `r` whose memory the window maps, else 0
/// (`len` must be at least the world size). Returns `SYMMWIN_OK`.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `out` is NULL or has room for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_mapped(
    w: *const crate::SymmwinWindow,
    out: *mut u8,
    len: usize,
) -> crate::SymmwinStatus {
    crate::guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { crate::window_arg(w) }?;
        let world = h.window.world();
        if out.is_null() || len < world {
            return Err(symmwin::Error::invalid(format!(
                "need room for {world} ranks"
            )));
        }
        // SAFETY: `out` has room for `len >= world` bytes (checked above).
        let out = unsafe { std::slice::from_raw_parts_mut(out, world) };
        for (r, slot) in out.iter_mut().enumerate() {
            *slot = u8::from(h.window.is_mapped(r));
        }
        Ok(crate::SymmwinStatus::SymmwinOk)
    })
}
