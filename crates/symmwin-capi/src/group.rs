//! Groups: creating one on a store, finding and releasing them.

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use symmwin::{Group, GroupSpec, Store};

use crate::args::str_arg;
use crate::file_store;
use crate::last_error::guard;
use crate::setup::group_config;
use crate::state::{provider, REGISTRY};
use crate::status::SymmwinStatus::{self, *};
use crate::store::{self, SymmwinStore};

/// Register group `name` for `device`. Idempotent: a second call for the same store
/// (`store.identity`) with the same rank and world is a no-op (its store is
/// released); a call with another identity replaces the group registered under that
/// name (a process group destroyed and made again). `global_ranks` may be NULL
/// (identity). `store` is a C callback store or one from `symmwin_file_store`.
/// `timeout_ms` is the process group's own timeout (0: none); the group's
/// rendezvous and host-side waits use it unless `SYMMWIN_TIMEOUT_MS` is set. Takes
/// ownership of `store` in every case.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string. `global_ranks` is NULL or points to
/// `world` readable ints. `store` holds callbacks that honour the `SymmwinStore`
/// contract, and its `describe` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn symmwin_group_init(
    name: *const c_char,
    device: c_int,
    rank: c_int,
    world: c_int,
    global_ranks: *const c_int,
    timeout_ms: u64,
    store: SymmwinStore,
) -> SymmwinStatus {
    let identity = store.identity;
    let store: Arc<dyn Store> = match file_store::take(&store) {
        Some(file) => Arc::new(file),
        None => Arc::new(store::CallbackStore::new(store)),
    };
    guard(move || {
        // SAFETY: `name` is NULL or a NUL-terminated string (the contract).
        let name = unsafe { str_arg(name, "group name") }?;
        let (rank, world) = match (usize::try_from(rank), usize::try_from(world)) {
            (Ok(r), Ok(w)) => (r, w),
            _ => {
                return Err(symmwin::Error::invalid(format!(
                    "rank {rank} / world {world} must be non-negative"
                )))
            }
        };
        if world > symmwin::MAX_WORLD {
            return Err(symmwin::Error::invalid(format!(
                "world size {world} is larger than symmwin supports ({})",
                symmwin::MAX_WORLD
            )));
        }
        let globals = if global_ranks.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller passes `world` ints when the pointer is non-null.
            unsafe { std::slice::from_raw_parts(global_ranks, world) }.to_vec()
        };
        let group = REGISTRY.group_or_insert(name, device, identity, || {
            Group::new(
                GroupSpec {
                    name: name.to_owned(),
                    rank,
                    world,
                    global_ranks: globals,
                },
                store,
                provider(device)?,
                &group_config(timeout_ms)?,
            )
        })?;
        if group.rank() != rank || group.world() != world {
            return Err(symmwin::Error::invalid(format!(
                "group {name} was registered as rank {} of {}, now given rank {rank} of {world}",
                group.rank(),
                group.world()
            )));
        }
        Ok(SymmwinOk)
    })
}

/// Forget group `name` (every group when `name` is NULL) and release its store, on
/// every device: the process group is gone. Windows made on it stay valid. Returns
/// the number of groups released.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn symmwin_release_groups(name: *const c_char) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        if name.is_null() {
            return REGISTRY.release_groups(None);
        }
        // SAFETY: as for every string argument.
        match unsafe { str_arg(name, "group name") } {
            Ok(name) => REGISTRY.release_groups(Some(name)),
            Err(_) => 0,
        }
    }))
    .unwrap_or(0)
}

/// Remove the socket files of this process's groups (at process exit: windows that
/// are still alive keep working locally, but no peer can reach this process again).
#[no_mangle]
pub extern "C" fn symmwin_remove_sockets() -> usize {
    catch_unwind(symmwin::adapter::remove_own_sockets).unwrap_or(0)
}

/// 1 if group `name` is registered for `device` with the store `identity` (see
/// `SymmwinStore::identity`), else 0: a cheap check before `symmwin_group_init`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn symmwin_group_matches(
    name: *const c_char,
    device: c_int,
    identity: u64,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as for every string argument.
        let Ok(name) = (unsafe { str_arg(name, "group name") }) else {
            return 0;
        };
        c_int::from(REGISTRY.has_group_for(name, device, identity))
    }))
    .unwrap_or(0)
}

/// 1 if group `name` is registered for `device`, else 0.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn symmwin_group_exists(name: *const c_char, device: c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as for every string argument.
        let Ok(name) = (unsafe { str_arg(name, "group name") }) else {
            return 0;
        };
        c_int::from(REGISTRY.group(name, device).is_some())
    }))
    .unwrap_or(0)
}
