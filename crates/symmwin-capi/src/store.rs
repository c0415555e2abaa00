//! A `Store` backed by C callbacks (torch's c10d Store, through the adapter).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, RwLock};
use symmwin::adapter::Recover;

use symmwin::{Error, ErrorKind, Phase, Store};

/// Receives a value from `try_get`.
pub type SymmwinSink = unsafe extern "C" fn(sink: *mut c_void, value: *const u8, len: usize);

/// Where a failing store callback says why (the store's own exception text, e.g. a
/// socket timeout or a dead server): the core adds it to its error. NUL-terminated;
/// left empty when the callback has nothing to say.
#[repr(C)]
pub struct SymmwinStoreError {
    /// The store's message, NUL-terminated (cut to fit).
    pub message: [c_char; 1024],
}

impl SymmwinStoreError {
    fn empty() -> Self {
        SymmwinStoreError { message: [0; 1024] }
    }

    /// The message, when the callback wrote one.
    fn text(&self) -> Option<String> {
        let bytes: Vec<u8> = self
            .message
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Store callbacks. Each returns 0 on success and non-zero on failure, except
/// `try_get`: 1 found (value passed to `sink`), 0 missing, negative on failure, and
/// `wait_all`: 1 all found (each value passed to `sink`, in key order), 0 not all
/// there by the timeout, negative on failure. A failing callback may say why in its
/// last argument (never NULL). `wait_all` may be NULL (the core then polls `try_get`). The callbacks may be called from any thread; `release` is called
/// once, last.
#[repr(C)]
pub struct SymmwinStore {
    /// Passed back to every callback.
    pub ctx: *mut c_void,
    /// Set `key` to `len` bytes at `value`.
    pub set: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            key: *const c_char,
            value: *const u8,
            len: usize,
            error: *mut SymmwinStoreError,
        ) -> c_int,
    >,
    /// Look `key` up without blocking.
    pub try_get: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            key: *const c_char,
            sink: SymmwinSink,
            sink_ctx: *mut c_void,
            error: *mut SymmwinStoreError,
        ) -> c_int,
    >,
    /// Add `delta` to the counter at `key`, storing the result in `*out`.
    pub add: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            key: *const c_char,
            delta: i64,
            out: *mut i64,
            error: *mut SymmwinStoreError,
        ) -> c_int,
    >,
    /// Delete `key`.
    pub remove: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            key: *const c_char,
            error: *mut SymmwinStoreError,
        ) -> c_int,
    >,
    /// Free `ctx`.
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    /// Who serves the store, for error messages (e.g. "TCPStore at host:29500, hosted
    /// by rank 0"); may be NULL. Copied during `symmwin_group_init`.
    pub describe: *const c_char,
    /// Identity of the store object (e.g. its address while `ctx` holds it): a group
    /// registered again under its name with another identity is a new group.
    pub identity: u64,
    /// Wait up to `timeout_ms` for all `count` keys, then pass every value to `sink`:
    /// one store round trip for a whole gather (c10d's `wait` + `multiGet`).
    pub wait_all: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            keys: *const *const c_char,
            count: usize,
            timeout_ms: u64,
            sink: SymmwinSink,
            sink_ctx: *mut c_void,
            error: *mut SymmwinStoreError,
        ) -> c_int,
    >,
}

/// The callbacks, shared by the calls in flight; `release` runs when the last goes.
struct Callbacks(SymmwinStore);

// SAFETY: the adapter's contract (SymmwinStore doc) is that the callbacks may be used
// from any thread; c10d stores are internally synchronised.
unsafe impl Send for Callbacks {}
// SAFETY: as above.
unsafe impl Sync for Callbacks {}

impl Drop for Callbacks {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: release is called exactly once, after the last use of ctx.
            unsafe { release(self.0.ctx) }
        }
    }
}

/// A store over C callbacks. Releasing it (the process group is gone) lets go of the
/// callbacks at once, or as soon as calls still in flight return; later calls fail.
pub(crate) struct CallbackStore {
    callbacks: RwLock<Option<Arc<Callbacks>>>,
    describe: Option<String>,
}

impl CallbackStore {
    pub(crate) fn new(store: SymmwinStore) -> Self {
        let describe = (!store.describe.is_null()).then(|| {
            // SAFETY: a non-null `describe` is a NUL-terminated string valid for this call.
            unsafe { CStr::from_ptr(store.describe) }
                .to_string_lossy()
                .into_owned()
        });
        CallbackStore {
            describe,
            callbacks: RwLock::new(Some(Arc::new(Callbacks(store)))),
        }
    }

    fn callbacks(&self) -> symmwin::Result<Arc<Callbacks>> {
        self.callbacks.read().recover().clone().ok_or_else(|| {
            Error::new(
                Phase::Publish,
                ErrorKind::Store("the process group of this store was destroyed".into()),
            )
        })
    }
}

fn key(k: &str) -> symmwin::Result<CString> {
    CString::new(k).map_err(|_| Error::invalid(format!("store key {k:?} contains NUL")))
}

/// A failed callback: which call, on which key, who serves the store and, when the
/// callback said, the store's own reason.
fn failed(what: &str, key: &str, describe: &Option<String>, error: &SymmwinStoreError) -> Error {
    let host = describe
        .as_ref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    let reason = error
        .text()
        .map(|r| format!(" (c10d store: {what}({key}): {r})"))
        .unwrap_or_default();
    Error::new(
        Phase::Publish,
        ErrorKind::Store(format!(
            "{what}({key}) failed in the c10d store{host}{reason}"
        )),
    )
}

fn missing(what: &str) -> Error {
    Error::invalid(format!("store callback {what} is NULL"))
}

unsafe extern "C" fn collect(sink: *mut c_void, value: *const u8, len: usize) {
    // SAFETY: `sink` is the &mut Vec<u8> passed by try_get below; `value` has `len` bytes.
    unsafe {
        let out = &mut *(sink as *mut Vec<u8>);
        if !value.is_null() {
            out.extend_from_slice(std::slice::from_raw_parts(value, len));
        }
    }
}

unsafe extern "C" fn collect_each(sink: *mut c_void, value: *const u8, len: usize) {
    // SAFETY: `sink` is the &mut Vec<Vec<u8>> passed by wait_all below; `value` has
    // `len` bytes.
    unsafe {
        let out = &mut *(sink as *mut Vec<Vec<u8>>);
        out.push(if value.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(value, len).to_vec()
        });
    }
}

impl Store for CallbackStore {
    fn wait_all(
        &self,
        keys: &[String],
        timeout: std::time::Duration,
    ) -> symmwin::Result<Vec<Option<Vec<u8>>>> {
        let cb = self.callbacks()?;
        let Some(f) = cb.0.wait_all else {
            return symmwin::adapter::testing::poll_all(self, keys, timeout);
        };
        let owned = keys
            .iter()
            .map(|k| key(k))
            .collect::<symmwin::Result<Vec<_>>>()?;
        let pointers: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        let mut values: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
        // Capped at 49 days, so that the store's own deadline arithmetic cannot overflow.
        let timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, u64::from(u32::MAX));
        let mut error = SymmwinStoreError::empty();
        // SAFETY: the callback contract of SymmwinStore; the keys, `values` and `error`
        // outlive the call, and `collect_each` appends one value per call.
        let rc = unsafe {
            f(
                cb.0.ctx,
                pointers.as_ptr(),
                pointers.len(),
                timeout_ms,
                collect_each,
                &mut values as *mut Vec<Vec<u8>> as *mut c_void,
                &mut error,
            )
        };
        match rc {
            1 if values.len() == keys.len() => Ok(values.into_iter().map(Some).collect()),
            // Not all there in time: one look per key says which ones are missing.
            0 => keys.iter().map(|k| self.try_get(k)).collect(),
            _ => Err(failed(
                "wait_all",
                keys.first().map_or("", String::as_str),
                &self.describe,
                &error,
            )),
        }
    }

    fn set(&self, k: &str, value: &[u8]) -> symmwin::Result<()> {
        let cb = self.callbacks()?;
        let f = cb.0.set.ok_or_else(|| missing("set"))?;
        let ck = key(k)?;
        let mut error = SymmwinStoreError::empty();
        // SAFETY: the callback contract of SymmwinStore; the key, value and `error`
        // outlive the call.
        match unsafe {
            f(
                cb.0.ctx,
                ck.as_ptr(),
                value.as_ptr(),
                value.len(),
                &mut error,
            )
        } {
            0 => Ok(()),
            _ => Err(failed("set", k, &self.describe, &error)),
        }
    }

    fn try_get(&self, k: &str) -> symmwin::Result<Option<Vec<u8>>> {
        let cb = self.callbacks()?;
        let f = cb.0.try_get.ok_or_else(|| missing("try_get"))?;
        let ck = key(k)?;
        let mut value = Vec::new();
        let mut error = SymmwinStoreError::empty();
        // SAFETY: as for set; `collect` appends to `value`, which outlives the call.
        let rc = unsafe {
            f(
                cb.0.ctx,
                ck.as_ptr(),
                collect,
                &mut value as *mut Vec<u8> as *mut c_void,
                &mut error,
            )
        };
        match rc {
            1 => Ok(Some(value)),
            0 => Ok(None),
            _ => Err(failed("get", k, &self.describe, &error)),
        }
    }

    fn add(&self, k: &str, delta: i64) -> symmwin::Result<i64> {
        let cb = self.callbacks()?;
        let f = cb.0.add.ok_or_else(|| missing("add"))?;
        let ck = key(k)?;
        let mut out = 0i64;
        let mut error = SymmwinStoreError::empty();
        // SAFETY: as for set; `out` outlives the call.
        match unsafe { f(cb.0.ctx, ck.as_ptr(), delta, &mut out, &mut error) } {
            0 => Ok(out),
            _ => Err(failed("add", k, &self.describe, &error)),
        }
    }

    fn delete(&self, k: &str) -> symmwin::Result<()> {
        let cb = self.callbacks()?;
        let f = cb.0.remove.ok_or_else(|| missing("remove"))?;
        let ck = key(k)?;
        let mut error = SymmwinStoreError::empty();
        // SAFETY: as for set.
        match unsafe { f(cb.0.ctx, ck.as_ptr(), &mut error) } {
            0 => Ok(()),
            _ => Err(failed("delete", k, &self.describe, &error)),
        }
    }

    fn describe(&self) -> Option<String> {
        self.describe.clone()
    }

    fn release(&self) {
        let taken = self.callbacks.write().recover().take();
        drop(taken);
    }
}
