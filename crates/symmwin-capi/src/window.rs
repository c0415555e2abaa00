//! Windows: rendezvous, release, and what a window tells about its ranks' memory.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use symmwin::Window;

use crate::args::{out_arg, rank_arg, str_arg};
use crate::last_error::{guard, guard_out};
use crate::state::REGISTRY;
use crate::status::SymmwinStatus::{self, *};

/// A window as the C side sees it: opaque, released with `symmwin_window_release`.
pub struct SymmwinWindow {
    pub(crate) window: Window,
    pub(crate) offset: usize,
}

/// The window behind a C handle (the argument checks of every window call).
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` not released before `'a` ends.
pub(crate) unsafe fn window_arg<'a>(w: *const SymmwinWindow) -> symmwin::Result<&'a SymmwinWindow> {
    // SAFETY: a non-null window pointer came from symmwin_rendezvous and is not yet released.
    unsafe { w.as_ref() }.ok_or_else(|| symmwin::Error::invalid("window is NULL"))
}

/// Layout and identity of a window.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SymmwinWindowInfo {
    /// Address of rank 0's slot of the window's span: rank `r`'s slot is at
    /// `base + r * stride` (`symmwin_window_peer_ptr` gives each rank's buffer and slot,
    /// NULL where it is not mapped here).
    pub base: usize,
    /// Distance between ranks' memory.
    pub stride: usize,
    /// Usable bytes per rank (what was allocated).
    pub size: usize,
    /// Offset of the pointer given to rendezvous inside its allocation.
    pub offset: usize,
    /// This process's rank.
    pub rank: c_int,
    /// Number of ranks.
    pub world: c_int,
    /// CUDA device, -1 for host memory.
    pub device: c_int,
    /// Signal pad bytes per rank.
    pub pad_size: usize,
}

/// The `pad_size` to pass to `symmwin_rendezvous` unless you need another: bytes of
/// signal pad per rank, 32 channels x 72 ranks x 4 bytes (torch's default, what the
/// ops and `symmwin_window_signal` expect). Any multiple of 4 is accepted, the same on
/// every rank; 0 makes a window without pads (no barrier, no signals).
pub const SYMMWIN_DEFAULT_PAD_SIZE: usize = 9216;

// The header carries a literal (cbindgen reads no other crate): keep it the core's.
const _: () = assert!(SYMMWIN_DEFAULT_PAD_SIZE == symmwin::DEFAULT_PAD_SIZE);

/// Make (or find, if made before) the window of the allocation covering `ptr` on
/// group `name`, with `pad_size` bytes of signal pad per rank
/// (`SYMMWIN_DEFAULT_PAD_SIZE`, or 0 for none). Collective on first use.
/// `SYMMWIN_NOT_FOUND` if `ptr` is not ours.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string. `out` is NULL or points to writable
/// storage for the result. `ptr` is only compared with live allocations, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_rendezvous(
    ptr: *mut c_void,
    name: *const c_char,
    device: c_int,
    pad_size: usize,
    out: *mut *mut SymmwinWindow,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let out = unsafe { out_arg(out, "out") }?;
        // SAFETY: as above, `name` is NULL or a NUL-terminated string.
        let name = unsafe { str_arg(name, "group name") }?;
        let group = REGISTRY.group(name, device).ok_or_else(|| {
            symmwin::Error::invalid(format!("group {name} is not registered on device {device}"))
        })?;
        match REGISTRY.rendezvous(ptr as usize, &group, pad_size)? {
            Some((window, offset)) => {
                *out = Box::into_raw(Box::new(SymmwinWindow { window, offset }));
                Ok(SymmwinOk)
            }
            None => Ok(SymmwinNotFound),
        }
    })
}

/// Release a window handle (the mapping goes when its last user does).
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing`,
/// released at most once and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_release(w: *mut SymmwinWindow) {
    if !w.is_null() {
        // SAFETY: `w` came from symmwin_rendezvous and is released exactly once.
        let handle = unsafe { Box::from_raw(w) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(handle)));
    }
}

/// Layout and identity of a window.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `out` is NULL or points to writable storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_info(
    w: *const SymmwinWindow,
    out: *mut SymmwinWindowInfo,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { window_arg(w) }?;
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let out = unsafe { out_arg(out, "out") }?;
        let layout = h.window.layout();
        *out = SymmwinWindowInfo {
            base: layout.base,
            stride: layout.stride,
            size: h.window.size(),
            offset: h.offset,
            rank: h.window.rank() as c_int,
            world: h.window.world() as c_int,
            device: h.window.provider_info().device,
            pad_size: h.window.pad_size(),
        };
        Ok(SymmwinOk)
    })
}

/// Address of `rank`'s buffer (`what` = `SYMMWIN_BUFFER_PTRS`), slot of the flat span
/// (`SYMMWIN_SLOT_PTRS`) or signal pad (`SYMMWIN_PAD_PTRS`) in this process; any other
/// `what` is `SYMMWIN_INVALID_ARGUMENT`. The buffer and the slot differ for this rank
/// only: its buffer is the pointer its allocation was made at (buffer + `offset` is
/// the pointer given to rendezvous), its slot `base + rank * stride` maps the same
/// memory a second time. NULL for a rank whose memory is not mapped here (a rank on
/// another host of a group spanning hosts), and for the pad of a window without pads.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `out` is NULL or points to writable storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_peer_ptr(
    w: *const SymmwinWindow,
    what: c_int,
    rank: i64,
    out: *mut *mut c_void,
) -> SymmwinStatus {
    let ptr = || {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { window_arg(w) }?;
        let r = rank_arg(rank, h.window.world(), "rank")?;
        let ptrs = match what {
            SYMMWIN_BUFFER_PTRS => h.window.ptrs(),
            SYMMWIN_SLOT_PTRS => h.window.slots(),
            SYMMWIN_PAD_PTRS => h.window.pad_ptrs(),
            other => {
                return Err(symmwin::Error::invalid(format!(
                    "unknown pointer kind {other} (SYMMWIN_BUFFER_PTRS, SYMMWIN_SLOT_PTRS \
                     or SYMMWIN_PAD_PTRS)"
                )))
            }
        };
        Ok(ptrs.get(r).copied().unwrap_or(0) as *mut c_void)
    };
    // SAFETY: as above.
    unsafe { guard_out(out, ptr) }
}

/// `symmwin_window_table_dev` table: `void*[world]`, every rank's buffer: this rank's
/// allocation, the peers' slots (torch's `buffer_ptrs`; also a
/// `symmwin_window_peer_ptr` kind).
pub const SYMMWIN_BUFFER_PTRS: c_int = 0;

/// `symmwin_window_table_dev` table: `void*[world]`, every rank's signal pad (also a
/// `symmwin_window_peer_ptr` kind).
pub const SYMMWIN_PAD_PTRS: c_int = 1;

/// `symmwin_window_table_dev` table: `int[world]`, global rank of every group rank.
pub const SYMMWIN_GLOBAL_RANKS: c_int = 2;

/// `symmwin_window_table_dev` table: `void*[world]`, every rank's slot of the flat
/// span, `base + rank * stride`, this rank's included (also a
/// `symmwin_window_peer_ptr` kind).
pub const SYMMWIN_SLOT_PTRS: c_int = 3;

/// Device-visible address of one of the window's tables (host address for host
/// memory): `table` is one of `SYMMWIN_BUFFER_PTRS`, `SYMMWIN_SLOT_PTRS`,
/// `SYMMWIN_PAD_PTRS`, `SYMMWIN_GLOBAL_RANKS`; any other value is
/// `SYMMWIN_INVALID_ARGUMENT`.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `out` is NULL or points to writable storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_table_dev(
    w: *const SymmwinWindow,
    table: c_int,
    out: *mut *mut c_void,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { window_arg(w) }?;
        let ptr = match table {
            SYMMWIN_BUFFER_PTRS => h.window.ptrs_dev()?,
            SYMMWIN_SLOT_PTRS => h.window.slots_dev()?,
            SYMMWIN_PAD_PTRS => h.window.pad_ptrs_dev()?,
            SYMMWIN_GLOBAL_RANKS => h.window.global_ranks_dev()?,
            other => {
                return Err(symmwin::Error::invalid(format!(
                    "unknown table {other} (SYMMWIN_BUFFER_PTRS, SYMMWIN_SLOT_PTRS, \
                     SYMMWIN_PAD_PTRS or SYMMWIN_GLOBAL_RANKS)"
                )))
            }
        };
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        *unsafe { out_arg(out, "out") }? = ptr as *mut c_void;
        Ok(SymmwinOk)
    })
}

/// Copy the global rank of every group rank into `out[0..world]`.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `out` is NULL or has room for `len` ints.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_global_ranks(
    w: *const SymmwinWindow,
    out: *mut c_int,
    len: usize,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { window_arg(w) }?;
        let ranks = h.window.global_ranks();
        if out.is_null() || len < ranks.len() {
            return Err(symmwin::Error::invalid(format!(
                "need room for {} ranks",
                ranks.len()
            )));
        }
        // SAFETY: `out` has room for `len >= ranks.len()` ints (checked above).
        unsafe { std::ptr::copy_nonoverlapping(ranks.as_ptr(), out, ranks.len()) };
        Ok(SymmwinOk)
    })
}
