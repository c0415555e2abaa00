//! Checked conversions of the C arguments: strings, out-pointers, windows, ranks,
//! channels, timeouts, and copying a string out to a caller's buffer.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::time::Duration;

use symmwin::{SignalOptions, Stream};

use crate::status::SymmwinStatus::{self, *};

/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn str_arg<'a>(s: *const c_char, what: &str) -> symmwin::Result<&'a str> {
    if s.is_null() {
        return Err(symmwin::Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string that outlives the call.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| symmwin::Error::invalid(format!("{what} is not UTF-8")))
}

/// # Safety
/// `p` is NULL or points to writable storage for a `T` that outlives `'a`.
pub(crate) unsafe fn out_arg<'a, T>(p: *mut T, what: &str) -> symmwin::Result<&'a mut T> {
    // SAFETY: a non-null out pointer from the caller points to writable storage for T.
    unsafe { p.as_mut() }.ok_or_else(|| symmwin::Error::invalid(format!("{what} is NULL")))
}

pub(crate) fn channel_arg(channel: c_int) -> symmwin::Result<usize> {
    usize::try_from(channel)
        .map_err(|_| symmwin::Error::invalid(format!("channel {channel} is negative")))
}

pub(crate) fn timeout(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// The C ABI's (channel, timeout in ms with 0 = the group's, raw stream) as options.
pub(crate) fn signal_options(
    channel: usize,
    timeout_ms: u64,
    stream: *mut c_void,
) -> SignalOptions {
    let options = SignalOptions::channel(channel).stream(Stream::from_raw(stream as usize));
    match timeout(timeout_ms) {
        Some(t) => options.timeout(t),
        None => options,
    }
}

/// A rank of a group of `world` ranks, range-checked by the core (never narrowed here).
pub(crate) fn rank_arg(r: i64, world: usize, what: &str) -> symmwin::Result<usize> {
    symmwin::ops::Rank::from(r).in_group(world, what)
}

/// Copy `s` and a NUL into `buf`, refusing a NULL or short buffer.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
pub(crate) unsafe fn copy_out(
    s: &str,
    buf: *mut c_char,
    len: usize,
) -> symmwin::Result<SymmwinStatus> {
    if buf.is_null() || len < s.len() + 1 {
        return Err(symmwin::Error::invalid(format!(
            "buffer of {len} bytes is too small for {}",
            s.len() + 1
        )));
    }
    // SAFETY: `buf` is not NULL and, by the caller's contract, has room for
    // `len > s.len()` bytes (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(SymmwinOk)
}
