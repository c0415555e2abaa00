//! The group's process group as C callbacks (torch's c10d ProcessGroup, through the
//! adapter): post sends and receives, wait for them, report how they ended. Which
//! path a message takes, who waits for it and when a failure is reported is the
//! core's ([`symmwin::signal::process_group`]).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use symmwin::adapter::{
    Direction, LinkFailure, Message, MessageMemory, ProcessGroupLink, ProcessGroupPeers,
};

/// `SymmwinMessage::direction`: from us to the peer.
pub const SYMMWIN_SEND: c_int = 0;
/// `SymmwinMessage::direction`: from the peer to us.
pub const SYMMWIN_RECV: c_int = 1;

/// `SymmwinRemote::post`'s `memory`: host memory, one work per message.
pub const SYMMWIN_MEMORY_HOST: c_int = 0;
/// `SymmwinRemote::post`'s `memory`: device memory, the batch as one group on the
/// current stream, its work in the last slot (the others NULL).
pub const SYMMWIN_MEMORY_DEVICE: c_int = 1;

/// A callback succeeded.
pub const SYMMWIN_REMOTE_OK: c_int = 0;
/// A callback failed and the backend's error type says the connection is gone
/// (c10d's `DistNetworkError`).
pub const SYMMWIN_REMOTE_BROKEN: c_int = 1;
/// A callback failed with any other error (the core tells a timeout by the clock).
pub const SYMMWIN_REMOTE_FAILED: c_int = 2;

/// One message of a batch.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SymmwinMessage {
    /// Group rank of the peer.
    pub peer: c_int,
    /// `SYMMWIN_SEND` or `SYMMWIN_RECV`.
    pub direction: c_int,
    /// Message tag, the same on both sides.
    pub tag: c_int,
    /// The bytes (device memory of the group's device, or host memory, as `post`'s
    /// `memory` says); NULL for a flag: a 4-byte buffer of zeros the callee supplies
    /// and keeps with the work.
    pub ptr: *mut c_void,
    /// Number of bytes (0 for a flag).
    pub len: usize,
}

/// What a failing callback reports.
#[repr(C)]
pub struct SymmwinRemoteError {
    /// Group rank of the peer whose message failed, -1 when unknown.
    pub peer: c_int,
    /// The backend's message, NUL-terminated.
    pub message: [c_char; 512],
}

/// The group's process group, for peers that are not mapped. The callbacks may be
/// called from any thread (the core waits for flag sends on threads of its own);
/// `release` is called once, last. Every callback but `release_work` and `release`
/// returns `SYMMWIN_REMOTE_OK`, or another `SYMMWIN_REMOTE_*` code after filling
/// `error`.
#[repr(C)]
pub struct SymmwinRemote {
    /// Passed back to every callback.
    pub ctx: *mut c_void,
    /// Non-zero when the process group moves device memory itself (NCCL); else the
    /// core stages device messages through host memory.
    pub moves_device_memory: c_int,
    /// Post `msgs[0..n]` (`memory`: `SYMMWIN_MEMORY_*`), writing the work of each
    /// message into `works[i]` (NULL where a later slot holds it).
    pub post: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            msgs: *const SymmwinMessage,
            n: usize,
            memory: c_int,
            works: *mut *mut c_void,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Wait for `work`, at most `timeout_ms` (0: the process group's own timeout);
    /// device work: the current stream waits. `work` stays the caller's.
    pub wait: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            work: *mut c_void,
            timeout_ms: u64,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Release a work from `post` (once, after its last wait).
    pub release_work: Option<unsafe extern "C" fn(ctx: *mut c_void, work: *mut c_void)>,
    /// Wait until the work on `stream` so far has completed.
    pub synchronize: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            stream: *mut c_void,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Copy `len` bytes from `src` to `dst`: host to device (on the current stream)
    /// when `to_device` is non-zero, else device to host (complete on return).
    pub copy: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            dst: *mut c_void,
            src: *const c_void,
            len: usize,
            to_device: c_int,
            error: *mut SymmwinRemoteError,
        ) -> c_int,
    >,
    /// Free `ctx`.
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

pub(crate) struct CallbackLink(SymmwinRemote);

// SAFETY: the SymmwinRemote contract is that the callbacks may be called from any
// thread; c10d process groups and their works are thread-safe.
unsafe impl Send for CallbackLink {}
// SAFETY: as above.
unsafe impl Sync for CallbackLink {}

impl Drop for CallbackLink {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: release is called exactly once, after the last use of ctx (every
            // work holds the link, so none is left).
            unsafe { release(self.0.ctx) }
        }
    }
}

/// A work the adapter posted; released when dropped.
pub(crate) struct CallbackWork {
    link: Arc<CallbackLink>,
    work: *mut c_void,
}

// SAFETY: works may be waited for and released from any thread (SymmwinRemote).
unsafe impl Send for CallbackWork {}

impl Drop for CallbackWork {
    fn drop(&mut self) {
        if let Some(release_work) = self.link.0.release_work {
            // SAFETY: `work` came from `post` and is released once, here.
            unsafe { release_work(self.link.0.ctx, self.work) }
        }
    }
}

/// The link as the core sees it: the callbacks, shared with every work they made.
pub(crate) struct SharedLink(Arc<CallbackLink>);

fn failed(message: String) -> LinkFailure {
    LinkFailure {
        peer: None,
        broken: false,
        message,
    }
}

fn missing(what: &str) -> LinkFailure {
    failed(format!("process-group callback {what} is NULL"))
}

/// Run one callback with an error slot and turn its report into a [`LinkFailure`].
fn reported(call: impl FnOnce(*mut SymmwinRemoteError) -> c_int) -> Result<(), LinkFailure> {
    let mut error = SymmwinRemoteError {
        peer: -1,
        message: [0; 512],
    };
    let rc = call(&mut error);
    if rc == SYMMWIN_REMOTE_OK {
        return Ok(());
    }
    error.message[511] = 0;
    // SAFETY: the buffer is NUL-terminated (forced above).
    let message = unsafe { CStr::from_ptr(error.message.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Err(LinkFailure {
        peer: usize::try_from(error.peer).ok(),
        broken: rc == SYMMWIN_REMOTE_BROKEN,
        message,
    })
}

fn c_message(m: &Message) -> Result<SymmwinMessage, LinkFailure> {
    let peer = c_int::try_from(m.peer)
        .map_err(|_| failed(format!("rank {} does not fit a C int", m.peer)))?;
    let tag = c_int::try_from(m.tag)
        .map_err(|_| failed(format!("tag {} does not fit a C int", m.tag)))?;
    let (ptr, len) = m.bytes.unwrap_or((0, 0));
    Ok(SymmwinMessage {
        peer,
        direction: match m.direction {
            Direction::Send => SYMMWIN_SEND,
            Direction::Recv => SYMMWIN_RECV,
        },
        tag,
        ptr: ptr as *mut c_void,
        len,
    })
}

impl ProcessGroupLink for SharedLink {
    type Work = CallbackWork;

    fn moves_device_memory(&self) -> bool {
        self.0 .0.moves_device_memory != 0
    }

    fn post(
        &self,
        batch: &[Message],
        memory: MessageMemory,
    ) -> Result<Vec<Option<CallbackWork>>, LinkFailure> {
        let post = self.0 .0.post.ok_or_else(|| missing("post"))?;
        let msgs = batch.iter().map(c_message).collect::<Result<Vec<_>, _>>()?;
        let memory = match memory {
            MessageMemory::Host => SYMMWIN_MEMORY_HOST,
            MessageMemory::Device => SYMMWIN_MEMORY_DEVICE,
        };
        let mut works = vec![std::ptr::null_mut::<c_void>(); msgs.len()];
        let result = reported(|error| {
            // SAFETY: the SymmwinRemote contract; `msgs`, `works` (n slots) and `error`
            // outlive the call.
            unsafe {
                post(
                    self.0 .0.ctx,
                    msgs.as_ptr(),
                    msgs.len(),
                    memory,
                    works.as_mut_ptr(),
                    error,
                )
            }
        });
        // Works posted before a failure are released too.
        let works = works
            .into_iter()
            .map(|work| {
                (!work.is_null()).then(|| CallbackWork {
                    link: Arc::clone(&self.0),
                    work,
                })
            })
            .collect();
        result.map(|()| works)
    }

    fn wait(&self, work: CallbackWork, bound: Option<Duration>) -> Result<(), LinkFailure> {
        let wait = self.0 .0.wait.ok_or_else(|| missing("wait"))?;
        let timeout_ms = bound.map_or(0, |b| {
            u64::try_from(b.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        reported(|error| {
            // SAFETY: the SymmwinRemote contract; `work` came from `post` and is
            // released only after this call (when it drops).
            unsafe { wait(self.0 .0.ctx, work.work, timeout_ms, error) }
        })
    }

    fn synchronize(&self, stream: usize) -> Result<(), LinkFailure> {
        let synchronize = self
            .0
             .0
            .synchronize
            .ok_or_else(|| missing("synchronize"))?;
        reported(|error| {
            // SAFETY: the SymmwinRemote contract; `stream` is the caller's stream.
            unsafe { synchronize(self.0 .0.ctx, stream as *mut c_void, error) }
        })
    }

    fn copy(&self, dst: usize, src: usize, len: usize, to_device: bool) -> Result<(), LinkFailure> {
        let copy = self.0 .0.copy.ok_or_else(|| missing("copy"))?;
        reported(|error| {
            // SAFETY: the SymmwinRemote contract; the core passes `len` bytes at each
            // side, alive for the call.
            unsafe {
                copy(
                    self.0 .0.ctx,
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    c_int::from(to_device),
                    error,
                )
            }
        })
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
    let link = SharedLink(Arc::new(CallbackLink(remote)));
    crate::guard(move || {
        // SAFETY: as for every string argument.
        let name = unsafe { crate::str_arg(name, "group name") }?;
        let group = crate::REGISTRY.group(name, device).ok_or_else(|| {
            symmwin::Error::invalid(format!("group {name} is not registered on device {device}"))
        })?;
        group.set_remote_peers(Arc::new(ProcessGroupPeers::new(link, device >= 0)));
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
