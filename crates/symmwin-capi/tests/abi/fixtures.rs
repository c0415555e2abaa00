//! What the ABI tests share: a store behind the C callbacks that a test can make
//! fail, host groups and windows made through the ABI, and the error checks.

use super::*;

pub(crate) fn last_error() -> String {
    // SAFETY: symmwin_last_error returns this thread's NUL-terminated message.
    unsafe { CStr::from_ptr(symmwin_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// The store behind the callbacks, and how a test wants `set` to behave.
pub(crate) struct TestStore {
    store: MemoryStore,
    fail_set: Option<&'static str>,
    released: &'static AtomicUsize,
}

/// # Safety
/// `ctx` is the `TestStore` of `store_over`, not yet released.
pub(crate) unsafe fn store<'a>(ctx: *mut c_void) -> &'a TestStore {
    // SAFETY: per this function's contract.
    unsafe { &*(ctx as *const TestStore) }
}

/// # Safety
/// `key` is a NUL-terminated string.
pub(crate) unsafe fn key<'a>(key: *const c_char) -> &'a str {
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(key) }.to_str().unwrap_or("")
}

pub(crate) unsafe extern "C" fn set(
    ctx: *mut c_void,
    k: *const c_char,
    value: *const u8,
    len: usize,
    error: *mut SymmwinStoreError,
) -> c_int {
    // SAFETY: the SymmwinStore contract: a live ctx, a key, `len` bytes at `value`
    // and a writable `error`.
    unsafe {
        let s = store(ctx);
        if let Some(reason) = s.fail_set {
            let reason = CString::new(reason).unwrap_or_default();
            let bytes = reason.as_bytes_with_nul();
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr().cast::<c_char>(),
                (*error).message.as_mut_ptr(),
                bytes.len(),
            );
            return -1;
        }
        let value = std::slice::from_raw_parts(value, len);
        c_int::from(s.store.set(key(k), value).is_err())
    }
}

pub(crate) unsafe extern "C" fn try_get(
    ctx: *mut c_void,
    k: *const c_char,
    sink: SymmwinSink,
    sink_ctx: *mut c_void,
    _error: *mut SymmwinStoreError,
) -> c_int {
    // SAFETY: the SymmwinStore contract.
    unsafe {
        match store(ctx).store.try_get(key(k)) {
            Ok(Some(v)) => {
                sink(sink_ctx, v.as_ptr(), v.len());
                1
            }
            Ok(None) => 0,
            Err(_) => -1,
        }
    }
}

pub(crate) unsafe extern "C" fn add(
    ctx: *mut c_void,
    k: *const c_char,
    delta: i64,
    out: *mut i64,
    _error: *mut SymmwinStoreError,
) -> c_int {
    // SAFETY: the SymmwinStore contract; `out` is writable.
    unsafe {
        match store(ctx).store.add(key(k), delta) {
            Ok(v) => {
                *out = v;
                0
            }
            Err(_) => -1,
        }
    }
}

pub(crate) unsafe extern "C" fn remove(
    ctx: *mut c_void,
    k: *const c_char,
    _error: *mut SymmwinStoreError,
) -> c_int {
    // SAFETY: the SymmwinStore contract.
    unsafe { c_int::from(store(ctx).store.delete(key(k)).is_err()) }
}

pub(crate) unsafe extern "C" fn release(ctx: *mut c_void) {
    // SAFETY: `release` is called once, last: the box of `store_over` is ours again.
    let s = unsafe { Box::from_raw(ctx as *mut TestStore) };
    s.released.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn store_over(
    fail_set: Option<&'static str>,
    released: &'static AtomicUsize,
    identity: u64,
) -> SymmwinStore {
    let ctx = Box::into_raw(Box::new(TestStore {
        store: MemoryStore::new(),
        fail_set,
        released,
    }));
    SymmwinStore {
        ctx: ctx.cast(),
        set: Some(set),
        try_get: Some(try_get),
        add: Some(add),
        remove: Some(remove),
        release: Some(release),
        describe: null(),
        identity,
        wait_all: None,
    }
}

pub(crate) fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A one-rank group `name` on host memory over a store whose `set` fails when asked.
pub(crate) fn host_group(
    name: &CStr,
    fail_set: Option<&'static str>,
    identity: u64,
) -> SymmwinStatus {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let store = store_over(fail_set, &RELEASED, identity);
    // SAFETY: a NUL-terminated name, NULL global ranks, a store honouring the contract.
    unsafe { symmwin_group_init(name.as_ptr(), -1, 0, 1, null(), 2000, store) }
}

/// A one-rank host window over a fresh allocation of `size` bytes.
pub(crate) fn host_window(name: &str, size: usize) -> (*mut c_void, *mut SymmwinWindow) {
    let name = c(name);
    assert_eq!(host_group(&name, None, 1), SymmwinOk, "{}", last_error());
    let mut ptr = null_mut();
    // SAFETY: `ptr` is writable.
    assert_eq!(unsafe { symmwin_alloc(-1, size, &mut ptr) }, SymmwinOk);
    let mut window = null_mut();
    // SAFETY: a live allocation, a NUL-terminated name, a writable out.
    let status = unsafe { symmwin_rendezvous(ptr, name.as_ptr(), -1, 64, &mut window) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    (ptr, window)
}

/// Undo [`host_window`]: release the window once, then free its allocation.
pub(crate) fn release_host_window(ptr: *mut c_void, window: *mut SymmwinWindow) {
    // SAFETY: a live window from `host_window`, released once and not used again.
    unsafe { symmwin_window_release(window) };
    assert_eq!(symmwin_free(ptr), SymmwinOk);
}

/// An operand of `len` bytes at the start of `window`.
pub(crate) fn whole(window: *const SymmwinWindow, len: usize) -> SymmwinOperand {
    SymmwinOperand {
        window,
        offset: 0,
        len,
        in_pads: 0,
        dtype: 0,
    }
}

pub(crate) fn assert_refused(status: SymmwinStatus, needle: &str) {
    assert_eq!(status, SymmwinInvalidArgument, "{}", last_error());
    assert!(last_error().contains(needle), "{}", last_error());
}
