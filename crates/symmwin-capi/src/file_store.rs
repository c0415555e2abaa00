//! A store in a directory, for C programs that have no store of their own: the core's
//! `FileStore`, handed out as a `SymmwinStore` that `symmwin_group_init` recognises and
//! uses directly, so its errors keep their kinds (a timeout, a full filesystem).

use std::collections::HashSet;
use std::ffi::{c_char, c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};

use symmwin::{FileStore, Store};

use crate::args::str_arg;
use crate::last_error::guard_out;
use crate::status::SymmwinStatus;
use crate::store::SymmwinStore;

/// What the `ctx` of a file store points to.
struct Context {
    store: FileStore,
    describe: CString,
}

/// The `ctx` of every file store made here and not yet taken or freed: a `ctx` is
/// read as a `Context` only when it is listed, never a foreign store's.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> MutexGuard<'static, Option<HashSet<usize>>> {
    // A set of addresses is consistent whatever panicked while it was held.
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Remove `ctx` from the live set: true when it was a file store of ours.
fn unlist(ctx: *mut c_void) -> bool {
    live()
        .as_mut()
        .is_some_and(|set| set.remove(&(ctx as usize)))
}

/// The file store behind `store`, when it is one of ours: its context is freed and
/// `store` must not be used again (it was given to `symmwin_group_init`).
pub(crate) fn take(store: &SymmwinStore) -> Option<FileStore> {
    if !unlist(store.ctx) {
        return None;
    }
    // SAFETY: a listed ctx is a `Box<Context>` made by `symmwin_file_store`; unlisting
    // it makes this the only owner.
    let context = unsafe { Box::from_raw(store.ctx.cast::<Context>()) };
    Some(context.store)
}

unsafe extern "C" fn release(ctx: *mut c_void) {
    if unlist(ctx) {
        // SAFETY: as in `take`.
        drop(unsafe { Box::from_raw(ctx.cast::<Context>()) });
    }
}

/// A store for `symmwin_group_init` in directory `dir`, shared by every rank of the
/// group (created `0700` if missing; it must be private to this user, as it holds the
/// tokens the ranks' sockets ask for). Give each job a fresh directory: requests an
/// earlier, failed job left there are refused as stale. `symmwin_group_init` takes
/// ownership; a store never given to it is freed with `symmwin_store_free`. symmwin
/// reads the store directly: its callbacks other than `release` are NULL.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string. `out` is NULL or points to writable
/// storage for the result.
#[no_mangle]
pub unsafe extern "C" fn symmwin_file_store(
    dir: *const c_char,
    out: *mut SymmwinStore,
) -> SymmwinStatus {
    let make = || {
        // SAFETY: `dir` is NULL or a NUL-terminated string (the contract).
        let dir = unsafe { str_arg(dir, "store directory") }?;
        let store = FileStore::new(dir)?;
        let describe = CString::new(store.describe().unwrap_or_default()).unwrap_or_default();
        let context = Box::into_raw(Box::new(Context { store, describe }));
        live()
            .get_or_insert_with(HashSet::new)
            .insert(context as usize);
        // SAFETY: `context` was just made and is freed only by `release` or `take`.
        let describe = unsafe { &(*context).describe }.as_ptr();
        Ok(SymmwinStore {
            ctx: context.cast::<c_void>(),
            release: Some(release),
            describe,
            identity: context as usize as u64,
            ..empty()
        })
    };
    // SAFETY: the pointers meet the `# Safety` contract of this entry point.
    unsafe { guard_out(out, make) }
}

/// Free a store that was not given to `symmwin_group_init` (calls its `release`),
/// and empty `*store` so that a second free is a no-op. NULL is a no-op.
///
/// # Safety
/// `store` is NULL or points to a store whose callbacks honour the `SymmwinStore`
/// contract and that no group owns.
#[no_mangle]
pub unsafe extern "C" fn symmwin_store_free(store: *mut SymmwinStore) {
    // SAFETY: the pointer meets the `# Safety` contract of this entry point.
    let Some(store) = (unsafe { store.as_mut() }) else {
        return;
    };
    let taken = std::mem::replace(store, empty());
    if let Some(release) = taken.release {
        // SAFETY: the store is not owned elsewhere (the contract), so this is the one
        // release of its ctx.
        unsafe { release(taken.ctx) };
    }
}

/// A store with no context and no callbacks.
fn empty() -> SymmwinStore {
    SymmwinStore {
        ctx: null_mut(),
        set: None,
        try_get: None,
        add: None,
        remove: None,
        release: None,
        describe: null(),
        identity: 0,
        wait_all: None,
    }
}
