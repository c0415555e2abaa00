//! The ops of `symmwin::ops` over the C ABI. Operands are (window, byte offset, bytes)
//! triples; enums cross as plain ints and are decoded here, so no C value can be an
//! invalid Rust enum.

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

use symmwin::ops::Operand;

/// The op entry points of the core, under the name the bodies below call them by.
mod collective {
    pub(crate) use symmwin::ops::{
        all_to_all, all_to_all_v, broadcast, put_or_get, put_signal, put_with_signal, tile_reduce,
        wait_for_signal_at, wait_signal,
    };
}
use symmwin::ops::Shape;
use symmwin::ops::{ElemType, Engine, OpOptions, ReduceOp, Rows, Tile};

use super::{guard, out_arg, str_arg, window_arg, SymmwinStatus, SymmwinWindow, REGISTRY};

/// One operand: `len` bytes at byte `offset` of this rank's slot of `window` (or of
/// its signal pad when `in_pads` is non-zero).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SymmwinOperand {
    /// A window from `symmwin_rendezvous`.
    pub window: *const SymmwinWindow,
    /// Byte offset inside the slot (`data_ptr - buffer_ptrs[rank]`).
    pub offset: usize,
    /// Bytes of this rank's operand.
    pub len: usize,
    /// Non-zero: the operand lies in the window's signal pads.
    pub in_pads: c_int,
    /// Its dtype's code from `symmwin_dtype_code` (0: untyped bytes); collective ops
    /// fail on every rank when ranks pass different dtypes.
    pub dtype: u64,
}

/// The code of the dtype torch names `name` (`"float32"`, `"torch.float32"` and
/// `c10::toString`'s `"Float"` alike), for `SymmwinOperand::dtype`: the same on every
/// rank, distinct for every dtype (a name symmwin does not know gets a code of its
/// own). NULL gives 0, untyped bytes.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn symmwin_dtype_code(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: a non-null name is a NUL-terminated string of the caller.
    let bytes = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    symmwin::ops::DType::from_name_bytes(bytes).code()
}

/// Per-call options of an op.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SymmwinOpOptions {
    /// One of `SYMMWIN_ENGINE_*`.
    pub engine: c_int,
    /// Wait limit in milliseconds; 0 uses the configured timeout.
    pub timeout_ms: u64,
    /// CUDA stream (ignored for host memory).
    pub stream: *mut c_void,
}

/// `SymmwinOpOptions::engine`: the process default (`SYMMWIN_OPS_ENGINE`, else auto).
pub const SYMMWIN_ENGINE_DEFAULT: c_int = 0;
/// `SymmwinOpOptions::engine`: per size, SM kernels or the copy engine.
pub const SYMMWIN_ENGINE_AUTO: c_int = 1;
/// `SymmwinOpOptions::engine`: SM kernels.
pub const SYMMWIN_ENGINE_SM: c_int = 2;
/// `SymmwinOpOptions::engine`: peer copies on the copy engine (no SM).
pub const SYMMWIN_ENGINE_COPY_ENGINE: c_int = 3;

/// `symmwin_op_all_to_all_v` shape: torch's `all_to_all_vdev`.
pub const SYMMWIN_A2A_FLAT: c_int = 0;
/// `symmwin_op_all_to_all_v` shape: torch's `all_to_all_vdev_2d` (dispatch).
pub const SYMMWIN_A2A_DISPATCH: c_int = 1;
/// `symmwin_op_all_to_all_v` shape: torch's `all_to_all_vdev_2d_offset` (combine).
pub const SYMMWIN_A2A_COMBINE: c_int = 2;

/// Tile element type: float32.
pub const SYMMWIN_ELEM_F32: c_int = 0;
/// Tile element type: float64.
pub const SYMMWIN_ELEM_F64: c_int = 1;
/// Tile element type: float16.
pub const SYMMWIN_ELEM_F16: c_int = 2;
/// Tile element type: bfloat16.
pub const SYMMWIN_ELEM_BF16: c_int = 3;

/// # Safety
/// `op.window` is NULL or a live window from `symmwin_rendezvous`, not released
/// while the operand is used.
unsafe fn operand<'a>(op: &SymmwinOperand) -> symmwin::Result<Operand<'a>> {
    // SAFETY: the window pointer meets this function's contract.
    let h = unsafe { window_arg(op.window) }?;
    Ok(Operand {
        window: &h.window,
        offset: op.offset,
        len: op.len,
        in_pads: op.in_pads != 0,
        dtype: symmwin::ops::DType::from_code(op.dtype),
    })
}

/// # Safety
/// `opts` is NULL or points to a readable `SymmwinOpOptions`.
unsafe fn options(opts: *const SymmwinOpOptions) -> symmwin::Result<OpOptions> {
    // SAFETY: a non-null options pointer points to a SymmwinOpOptions of the caller.
    let Some(o) = (unsafe { opts.as_ref() }) else {
        return Ok(OpOptions::default());
    };
    let engine = match o.engine {
        SYMMWIN_ENGINE_DEFAULT => None,
        SYMMWIN_ENGINE_AUTO => Some(Engine::Auto),
        SYMMWIN_ENGINE_SM => Some(Engine::Sm),
        SYMMWIN_ENGINE_COPY_ENGINE => Some(Engine::CopyEngine),
        other => {
            return Err(symmwin::Error::invalid(format!(
                "unknown engine code {other}"
            )))
        }
    };
    Ok(OpOptions {
        engine,
        timeout: (o.timeout_ms > 0).then(|| Duration::from_millis(o.timeout_ms)),
        stream: o.stream as usize,
    })
}

fn ok(r: symmwin::Result<()>) -> symmwin::Result<SymmwinStatus> {
    r.map(|()| SymmwinStatus::SymmwinOk)
}

/// Equal-split all-to-all of `input` into `out` (torch's `nvshmem_all_to_all`), both
/// of `elem_size`-byte elements whose count splits evenly among the ranks.
///
/// # Safety
/// Every operand's `window` is NULL or a window not yet released, and the operand's
/// bytes lie inside it; `opts` is NULL or points to a readable `SymmwinOpOptions` whose
/// `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_all_to_all(
    input: SymmwinOperand,
    out: SymmwinOperand,
    elem_size: usize,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        ok(collective::all_to_all(
            unsafe { operand(&input) }?,
            unsafe { operand(&out) }?,
            elem_size,
            &unsafe { options(opts) }?,
        ))
    })
}

/// The all-to-all-v family (`shape` is one of `SYMMWIN_A2A_*`); `splits` is
/// `in_splits` (`in_splits_offsets` for combine). Rows count dim 0 of `row_bytes`
/// bytes; `major_align` is used by dispatch only and must be positive there.
///
/// # Safety
/// Every operand's `window` is NULL or a window not yet released, and the operand's
/// bytes lie inside it; `opts` is NULL or points to a readable `SymmwinOpOptions` whose
/// `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn symmwin_op_all_to_all_v(
    shape: c_int,
    major_align: i64,
    input: SymmwinOperand,
    out: SymmwinOperand,
    splits: SymmwinOperand,
    out_splits_offsets: SymmwinOperand,
    row_bytes: usize,
    in_rows: usize,
    out_rows: usize,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        let shape = match shape {
            SYMMWIN_A2A_FLAT => Shape::Flat,
            // The core checks the value; a negative one does not even convert.
            SYMMWIN_A2A_DISPATCH => Shape::Dispatch {
                major_align: usize::try_from(major_align).map_err(|_| {
                    symmwin::Error::invalid(format!(
                        "major_align must be positive, not {major_align}"
                    ))
                })?,
            },
            SYMMWIN_A2A_COMBINE => Shape::Combine,
            other => {
                return Err(symmwin::Error::invalid(format!(
                    "unknown shape code {other}"
                )))
            }
        };
        let rows = Rows {
            row_bytes,
            in_rows,
            out_rows,
        };
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        ok(collective::all_to_all_v(
            shape,
            unsafe { operand(&input) }?,
            unsafe { operand(&out) }?,
            unsafe { operand(&splits) }?,
            unsafe { operand(&out_splits_offsets) }?,
            rows,
            &unsafe { options(opts) }?,
        ))
    })
}

/// Broadcast `root`'s `buf` to every rank.
///
/// # Safety
/// Every operand's `window` is NULL or a window not yet released, and the operand's
/// bytes lie inside it; `opts` is NULL or points to a readable `SymmwinOpOptions` whose
/// `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_broadcast(
    buf: SymmwinOperand,
    root: i64,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let (b, opts) = unsafe { (operand(&buf)?, options(opts)?) };
        ok(collective::broadcast(b, root, &opts))
    })
}

/// One-sided copy of this rank's `buf` into `peer`'s (`into_peer` non-zero: put) or
/// of `peer`'s into this rank's (get).
///
/// # Safety
/// Every operand's `window` is NULL or a window not yet released, and the operand's
/// bytes lie inside it; `opts` is NULL or points to a readable `SymmwinOpOptions` whose
/// `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_put_get(
    buf: SymmwinOperand,
    peer: i64,
    into_peer: c_int,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let (b, opts) = unsafe { (operand(&buf)?, options(opts)?) };
        ok(collective::put_or_get(b, peer, into_peer != 0, &opts))
    })
}

/// Put `buf` to `peer`, then set `peer`'s 64-bit `sig` to `value`.
///
/// # Safety
/// Every operand's `window` is NULL or a window not yet released, and the operand's
/// bytes lie inside it; `opts` is NULL or points to a readable `SymmwinOpOptions` whose
/// `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_put_with_signal(
    buf: SymmwinOperand,
    sig: SymmwinOperand,
    value: u64,
    peer: i64,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let (b, sig) = unsafe { (operand(&buf)?, operand(&sig)?) };
        // SAFETY: as above.
        let opts = unsafe { options(opts) }?;
        ok(collective::put_with_signal(b, sig, value, peer, &opts))
    })
}

/// Wait until the 64-bit word at `word` equals `value` (sent by `peer`, a rank of
/// group `name` on `device`, -1 for host memory), then zero it. `word` must be an
/// 8-byte aligned word of symmetric memory of that device: a `symmwin_alloc`
/// allocation or this rank's signal pad of a window of the group. Anything else (a
/// plain buffer, a stack word), a peer outside the group or a group not registered is
/// `SYMMWIN_INVALID_ARGUMENT` at once, never a wait that runs out.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string. `word` is only compared with live
/// allocations and pads before the wait; on a device it must stay allocated until the
/// wait completes on its stream. `opts` is NULL or points to a readable
/// `SymmwinOpOptions`.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_wait_for_signal(
    word: *mut c_void,
    name: *const c_char,
    device: c_int,
    value: u64,
    peer: i64,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: a NUL-terminated string from the caller.
        let name = unsafe { str_arg(name, "group name") }?;
        let group = REGISTRY.group(name, device).ok_or_else(|| {
            symmwin::Error::invalid(format!(
                "wait_for_signal: group {name} is not registered on device {device} (no \
                 rendezvous on it yet)"
            ))
        })?;
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let opts = unsafe { options(opts) }?;
        // SAFETY: the core checks the word is live symmetric memory; the caller keeps a
        // device word allocated until the wait completes.
        ok(unsafe {
            collective::wait_for_signal_at(&REGISTRY, &group, word as usize, value, peer, &opts)
        })
    })
}

/// Copy `len` bytes at `src` into `peer`'s `dst`, then signal `peer` on channel 0.
/// `src` must be memory of the window's provider, readable for `len` bytes.
///
/// # Safety
/// `src` is memory of the window's provider, readable for `len` bytes until the copy
/// completes. Every operand's `window` is NULL or a window not yet released, and the
/// operand's bytes lie inside it; `opts` is NULL or points to a readable
/// `SymmwinOpOptions` whose `stream` is NULL or a CUDA stream of the windows' device.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_put_signal(
    src: *const c_void,
    len: usize,
    dst: SymmwinOperand,
    peer: i64,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        if src.is_null() && len > 0 {
            return Err(symmwin::Error::invalid("put_signal: src is NULL"));
        }
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let d = unsafe { operand(&dst) }?;
        // SAFETY: the caller guarantees `src..src+len` is readable memory of the
        // window's provider that outlives the op.
        ok(unsafe { collective::put_signal(src as usize, len, d, peer, &options(opts)?) })
    })
}

/// Wait for `peer`'s `symmwin_op_put_signal` on window `w`.
///
/// # Safety
/// `w` is NULL or a window from `symmwin_rendezvous` or `symmwin_window_existing` that
/// is not yet released. `opts` is NULL or points to a readable `SymmwinOpOptions`.
#[no_mangle]
pub unsafe extern "C" fn symmwin_op_wait_signal(
    w: *const SymmwinWindow,
    peer: i64,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let h = unsafe { window_arg(w) }?;
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        ok(collective::wait_signal(&h.window, peer, &unsafe {
            options(opts)
        }?))
    })
}

/// Tile reduce: rank `roots[i]` receives the reduction over all ranks of `ins[i]` in
/// its `out`. Tiles are `rows` x `cols` elements of type `elem` (`SYMMWIN_ELEM_*`),
/// rows `row_stride` elements apart; `reduce_op` is `"sum"`.
///
/// # Safety
/// `ins` is NULL or points to `n` operands and `roots` is NULL or points to `n`
/// `int64_t`s;
/// `reduce_op` is NULL or a NUL-terminated string. Every operand's `window` is NULL or
/// a window not yet released, and the operand's bytes lie inside it; `opts` is NULL or
/// points to a readable `SymmwinOpOptions` whose `stream` is NULL or a CUDA stream of
/// the windows' device.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn symmwin_op_tile_reduce(
    ins: *const SymmwinOperand,
    n: usize,
    roots: *const i64,
    out: SymmwinOperand,
    rows: usize,
    cols: usize,
    row_stride: usize,
    elem: c_int,
    reduce_op: *const c_char,
    opts: *const SymmwinOpOptions,
) -> SymmwinStatus {
    guard(|| {
        if n == 0 || ins.is_null() || roots.is_null() {
            return Err(symmwin::Error::invalid("tile_reduce: no tiles"));
        }
        // SAFETY: the caller passes arrays of `n` operands and `n` roots.
        let (ins, roots) = unsafe {
            (
                std::slice::from_raw_parts(ins, n),
                std::slice::from_raw_parts(roots, n),
            )
        };
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let o = unsafe { operand(&out) }?;
        let ins = ins
            .iter()
            // SAFETY: every input operand's window meets this entry point's contract.
            .map(|op| unsafe { operand(op) })
            .collect::<symmwin::Result<Vec<_>>>()?;
        let elem = match elem {
            SYMMWIN_ELEM_F32 => ElemType::F32,
            SYMMWIN_ELEM_F64 => ElemType::F64,
            SYMMWIN_ELEM_F16 => ElemType::F16,
            SYMMWIN_ELEM_BF16 => ElemType::BF16,
            other => {
                return Err(symmwin::Error::invalid(format!(
                    "unknown element code {other}"
                )))
            }
        };
        // SAFETY: a NUL-terminated string from the caller.
        let op: ReduceOp = unsafe { str_arg(reduce_op, "reduce_op") }?.parse()?;
        let tile = Tile {
            rows,
            cols,
            row_stride,
            elem,
        };
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        ok(collective::tile_reduce(&ins, roots, o, tile, op, &unsafe {
            options(opts)
        }?))
    })
}

/// The window already made for the allocation covering `ptr` on group `name` of
/// `device` (-1 for host memory), and `ptr`'s byte offset in each rank's slot;
/// `SYMMWIN_NOT_FOUND` when there is none yet. Never collective. Release the window
/// with `symmwin_window_release`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string. `out` and `offset` are NULL or point to
/// writable storage. `ptr` is only compared with live allocations, never read.
#[no_mangle]
pub unsafe extern "C" fn symmwin_window_existing(
    ptr: *mut c_void,
    name: *const c_char,
    device: c_int,
    out: *mut *mut SymmwinWindow,
    offset: *mut usize,
) -> SymmwinStatus {
    guard(|| {
        // SAFETY: a NUL-terminated string from the caller.
        let name = unsafe { str_arg(name, "group name") }?;
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let out = unsafe { out_arg(out, "out") }?;
        // SAFETY: the pointers meet the `# Safety` contract of this entry point.
        let offset = unsafe { out_arg(offset, "offset") }?;
        match REGISTRY.existing_window(ptr as usize, name, device) {
            Some((window, at)) => {
                *offset = at;
                *out = Box::into_raw(Box::new(SymmwinWindow { window, offset: at }));
                Ok(SymmwinStatus::SymmwinOk)
            }
            None => Ok(SymmwinStatus::SymmwinNotFound),
        }
    })
}
