//! Address questions the adapter would otherwise answer with arithmetic of its own:
//! the flat layout of any backend's buffer pointers, and where a tensor lies in a
//! window's signal pad.

use std::ffi::c_void;

use crate::args::out_arg;
use crate::last_error::guard;
use crate::status::SymmwinStatus;
use crate::window::window_arg;
use crate::SymmwinWindow;

/// `(base, stride)` with `ptrs[r] == base + r * stride` for every mapped rank (0
/// entries are ranks on another host: not mapped, nothing to check).
fn flat_layout(ptrs: &[usize]) -> symmwin::Result<(usize, usize)> {
    let base = ptrs.first().copied().unwrap_or(0);
    // Wrapping, as the pointers' own arithmetic: a rank 1 on another host (0) makes a
    // stride no mapped rank can match, so the mismatch is reported below.
    let stride = ptrs.get(1).map_or(0, |&p| p.wrapping_sub(base));
    for (r, &p) in ptrs.iter().enumerate() {
        let expected = base.wrapping_add(r.wrapping_mul(stride));
        if p != 0 && p != expected {
            return Err(symmwin::Error::invalid(format!(
                "flat_layout: buffer pointers are not evenly spaced (rank {r} is at {p}, \
                 expected {expected})"
            )));
        }
    }
    Ok((base, stride))
}

/// The flat layout of `n` buffer pointers of any backend's handle (NULL entries:
/// ranks not mapped): `*base` and `*stride` with `ptrs[r] == base + r * stride`.
/// `SYMMWIN_INVALID_ARGUMENT` when they are not evenly spaced.
///
/// # Safety
/// `ptrs` is NULL or points to `n` readable pointers; `base` and `stride` are NULL
/// or point to writable storage.
#[no_mangle]
pub unsafe extern "C" fn symmwin_flat_layout(
    ptrs: *const *const c_void,
    n: usize,
    base: *mut usize,
    stride: *mut usize,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let (base, stride) = unsafe { (out_arg(base, "base")?, out_arg(stride, "stride")?) };
        if ptrs.is_null() || n == 0 {
            return Err(symmwin::Error::invalid("flat_layout: no buffer pointers"));
        }
        // SAFETY: `ptrs` points to `n` readable pointers (the contract, non-NULL).
        let ptrs = unsafe { std::slice::from_raw_parts(ptrs, n) };
        let addrs: Vec<usize> = ptrs.iter().map(|&p| p as usize).collect();
        (*base, *stride) = flat_layout(&addrs)?;
        Ok(SymmwinStatus::SymmwinOk)
    })
}

/// Where `[ptr, ptr + len)` lies in this rank's signal pad of `w`: its byte offset
/// there, `SYMMWIN_NOT_FOUND` when it is not inside the pad (or `w` has none).
///
/// # Safety
/// `w` is NULL or a window not yet released; `offset` is NULL or points to writable
/// storage. `ptr` is only compared, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_pad_offset(
    w: *const SymmwinWindow,
    ptr: *const c_void,
    len: usize,
    offset: *mut usize,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let (h, offset) = unsafe { (window_arg(w)?, out_arg(offset, "offset")?) };
        let window = &h.window;
        let pad = window.pad_ptrs().get(window.rank()).copied().unwrap_or(0);
        let start = (ptr as usize).checked_sub(pad);
        match start
            .filter(|&s| pad != 0 && s.checked_add(len).is_some_and(|e| e <= window.pad_size()))
        {
            Some(s) => {
                *offset = s;
                Ok(SymmwinStatus::SymmwinOk)
            }
            None => Ok(SymmwinStatus::SymmwinNotFound),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::flat_layout;

    #[test]
    fn evenly_spaced_pointers_give_their_layout_and_unmapped_ranks_are_skipped() {
        assert_eq!(flat_layout(&[100, 164, 228]).unwrap(), (100, 64));
        assert_eq!(flat_layout(&[100, 164, 0, 292]).unwrap(), (100, 64));
        assert_eq!(flat_layout(&[100]).unwrap(), (100, 0));
        let e = flat_layout(&[100, 164, 229]).unwrap_err().to_string();
        assert!(e.contains("rank 2 is at 229, expected 228"), "{e}");
    }
}
