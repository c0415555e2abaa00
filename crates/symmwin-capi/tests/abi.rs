//! The C ABI's own entry points, called as C calls them: NULL pointers, handles that
//! are not ours and out-of-range values are refused with a status and a message,
//! never a crash; store failures carry the store's own reason.

#[path = "abi/fixtures.rs"]
mod fixtures;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use symmwin::{MemoryStore, Store};
use symmwin_capi::*;
use SymmwinStatus::*;

use fixtures::*;

#[test]
fn null_out_pointers_are_refused_and_allocate_nothing() {
    let before = symmwin_allocation_count();
    // SAFETY: a NULL out is what is under test; it is checked before any write.
    let status = unsafe { symmwin_alloc(-1, 4096, null_mut()) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("out is NULL"), "{}", last_error());
    assert_eq!(symmwin_allocation_count(), before);
    // SAFETY: as above.
    let status = unsafe { symmwin_alloc_size(null_mut(), null_mut()) };
    assert_eq!(status, SymmwinInvalidArgument);
}

#[test]
fn null_and_foreign_handles_are_refused() {
    let mut info = SymmwinWindowInfo::default();
    // SAFETY: a NULL window is what is under test; `info` is writable.
    let status = unsafe { symmwin_window_info(null(), &mut info) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("window is NULL"), "{}", last_error());
    // A pointer that is not a symmwin allocation: freed as an error, not found elsewhere.
    let mut own = 0u64;
    let foreign = (&mut own as *mut u64).cast::<c_void>();
    assert_eq!(symmwin_free(foreign), SymmwinInvalidArgument);
    assert!(last_error().contains("not a live symmwin allocation"));
    let mut size = 0usize;
    // SAFETY: `size` is writable; `foreign` is only compared, never read.
    assert_eq!(
        unsafe { symmwin_alloc_size(foreign, &mut size) },
        SymmwinNotFound
    );
    // SAFETY: NULL windows are released as a no-op.
    unsafe { symmwin_window_release(null_mut()) };
}

#[test]
fn null_names_are_refused_and_the_store_is_released_anyway() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let store = store_over(None, &RELEASED, 7);
    // SAFETY: a NULL name is what is under test; the store honours the contract.
    let status = unsafe { symmwin_group_init(null(), -1, 0, 1, null(), 0, store) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(
        last_error().contains("group name is NULL"),
        "{}",
        last_error()
    );
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1, "the store leaked");
    // SAFETY: NULL names are refused as "no such group".
    assert_eq!(unsafe { symmwin_group_exists(null(), -1) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { symmwin_group_matches(null(), -1, 7) }, 0);
}

#[test]
fn bad_ranks_and_worlds_are_refused() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let name = c("abi-bad-world");
    for (rank, world) in [(-1, 2), (0, -3)] {
        let store = store_over(None, &RELEASED, 8);
        // SAFETY: a NUL-terminated name, NULL global ranks, a valid store.
        let status =
            unsafe { symmwin_group_init(name.as_ptr(), -1, rank, world, null(), 0, store) };
        assert_eq!(status, SymmwinInvalidArgument, "rank {rank} world {world}");
        assert!(
            last_error().contains("must be non-negative"),
            "{}",
            last_error()
        );
    }
    let store = store_over(None, &RELEASED, 8);
    let too_many = c_int::try_from(symmwin::MAX_WORLD + 1).unwrap();
    // SAFETY: as above.
    let status = unsafe { symmwin_group_init(name.as_ptr(), -1, 0, too_many, null(), 0, store) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("larger than symmwin supports"));
    assert_eq!(RELEASED.load(Ordering::SeqCst), 3);
}

#[test]
fn a_table_that_does_not_exist_is_refused() {
    let (ptr, window) = host_window("abi-tables", 4096);
    let mut out = null_mut();
    for table in [
        SYMMWIN_BUFFER_PTRS,
        SYMMWIN_SLOT_PTRS,
        SYMMWIN_PAD_PTRS,
        SYMMWIN_GLOBAL_RANKS,
    ] {
        // SAFETY: a live window and a writable out.
        let status = unsafe { symmwin_window_table_dev(window, table, &mut out) };
        assert_eq!(status, SymmwinOk, "table {table}: {}", last_error());
        assert!(!out.is_null());
    }
    for table in [4, -1, c_int::MAX] {
        // SAFETY: as above.
        let status = unsafe { symmwin_window_table_dev(window, table, &mut out) };
        assert_eq!(status, SymmwinInvalidArgument, "table {table}");
        assert!(
            last_error().contains(&format!("unknown table {table}")),
            "{}",
            last_error()
        );
    }
    release_host_window(ptr, window);
}

#[test]
fn peer_pointers_come_from_the_core_and_bad_arguments_are_refused() {
    let (ptr, window) = host_window("abi-peer-ptrs", 4096);
    let mut info = SymmwinWindowInfo::default();
    // SAFETY: a live window and a writable out.
    assert_eq!(unsafe { symmwin_window_info(window, &mut info) }, SymmwinOk);
    let mut out = null_mut();
    // SAFETY: as above.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_BUFFER_PTRS, 0, &mut out) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    assert_eq!(
        out as usize,
        ptr as usize - info.offset,
        "rank 0's own buffer is its allocation"
    );
    // SAFETY: as above.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_SLOT_PTRS, 0, &mut out) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    assert_eq!(out as usize, info.base, "rank 0's slot is at the base");
    assert_ne!(
        info.base, ptr as usize,
        "the own slot is an alias, not the allocation"
    );
    // SAFETY: as above.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_PAD_PTRS, 0, &mut out) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    assert!(!out.is_null(), "a window of 64 pad bytes has a pad");
    // SAFETY: a NULL window is what is under test.
    let status = unsafe { symmwin_window_peer_ptr(null(), SYMMWIN_BUFFER_PTRS, 0, &mut out) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("window is NULL"), "{}", last_error());
    // 2**32 would be rank 0 if anything narrowed it to 32 bits.
    for rank in [-1, 1, i64::from(c_int::MAX), 1 << 32, i64::MIN] {
        // SAFETY: a live window and a writable out.
        let status =
            unsafe { symmwin_window_peer_ptr(window, SYMMWIN_BUFFER_PTRS, rank, &mut out) };
        assert_eq!(status, SymmwinInvalidArgument, "rank {rank}");
        assert!(
            last_error().contains(&format!(
                "rank {rank} is not a rank of the group (0 to 0, world size 1)"
            )),
            "{}",
            last_error()
        );
    }
    for what in [SYMMWIN_GLOBAL_RANKS, 4, -1] {
        // SAFETY: as above.
        let status = unsafe { symmwin_window_peer_ptr(window, what, 0, &mut out) };
        assert_eq!(status, SymmwinInvalidArgument, "kind {what}");
        assert!(last_error().contains(&format!("unknown pointer kind {what}")));
    }
    // SAFETY: a NULL out is what is under test; it is checked before any write.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_PAD_PTRS, 0, null_mut()) };
    assert_eq!(status, SymmwinInvalidArgument);
    release_host_window(ptr, window);
}

#[test]
fn ranks_and_channels_out_of_range_are_refused() {
    let (ptr, window) = host_window("abi-ranks", 4096);
    let mut pad = null_mut();
    // SAFETY: a live window and a writable out.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_PAD_PTRS, 1, &mut pad) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("rank 1 is not a rank of the group"));
    for op in [SYMMWIN_SIGNAL_PUT, SYMMWIN_SIGNAL_WAIT] {
        for peer in [-1, 1 << 32] {
            // SAFETY: a live window, no stream (host memory).
            let status = unsafe { symmwin_window_signal(window, op, peer, 0, 100, null_mut()) };
            assert_eq!(status, SymmwinInvalidArgument);
            assert!(
                last_error().contains(&format!("peer {peer} is not a rank of the group")),
                "{}",
                last_error()
            );
        }
    }
    // SAFETY: as above.
    let status =
        unsafe { symmwin_window_signal(window, SYMMWIN_SIGNAL_BARRIER, 0, -2, 100, null_mut()) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(
        last_error().contains("channel -2 is negative"),
        "{}",
        last_error()
    );
    for op in [3, -1] {
        // SAFETY: as above.
        let status = unsafe { symmwin_window_signal(window, op, 0, 0, 100, null_mut()) };
        assert_eq!(status, SymmwinInvalidArgument);
        assert!(last_error().contains(&format!("unknown signal operation {op}")));
    }
    // SAFETY: as above; a barrier of one rank has no one to wait for.
    let status =
        unsafe { symmwin_window_signal(window, SYMMWIN_SIGNAL_BARRIER, 0, 0, 100, null_mut()) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    let mut ranks = [0 as c_int; 1];
    // SAFETY: `ranks` has room for 0 ints, as `len` says.
    let status = unsafe { symmwin_window_global_ranks(window, ranks.as_mut_ptr(), 0) };
    assert_eq!(status, SymmwinInvalidArgument);
    release_host_window(ptr, window);
}

#[test]
fn a_bad_engine_and_null_operands_are_refused() {
    let (ptr, window) = host_window("abi-ops", 4096);
    let operand = |window| SymmwinOperand {
        window,
        offset: 0,
        len: 64,
        in_pads: 0,
        dtype: 0,
    };
    let opts = SymmwinOpOptions {
        engine: 9,
        timeout_ms: 100,
        stream: null_mut(),
    };
    // SAFETY: a live window for both operands, readable options.
    let status = unsafe { symmwin_op_all_to_all(operand(window), operand(window), 4, &opts) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(
        last_error().contains("unknown engine code 9"),
        "{}",
        last_error()
    );
    // SAFETY: a NULL window is what is under test; NULL options are the defaults.
    let status = unsafe { symmwin_op_all_to_all(operand(null()), operand(window), 4, null()) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("window is NULL"), "{}", last_error());
    release_host_window(ptr, window);
}

#[test]
fn small_buffers_are_refused_and_sizes_can_be_queried() {
    let mut one = [0 as c_char; 1];
    // SAFETY: `one` has room for 1 byte, as `len` says.
    let status = unsafe { symmwin_handle_type(-1, one.as_mut_ptr(), one.len()) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(last_error().contains("too small"), "{}", last_error());
    let mut needed = 0usize;
    // SAFETY: a NULL buffer asks for the size only; `needed` is writable.
    assert_eq!(
        unsafe { symmwin_probe_json(null_mut(), 0, &mut needed) },
        SymmwinOk
    );
    assert!(needed > 1);
    let mut json = vec![0 as c_char; needed];
    // SAFETY: `json` has room for `needed` bytes.
    let status = unsafe { symmwin_probe_json(json.as_mut_ptr(), json.len(), null_mut()) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
}

#[test]
fn a_failing_store_call_reports_the_stores_own_reason() {
    let name = c("abi-store-fails");
    let reason = "Connection reset by peer";
    assert_eq!(
        host_group(&name, Some(reason), 11),
        SymmwinOk,
        "{}",
        last_error()
    );
    let mut ptr = null_mut();
    // SAFETY: `ptr` is writable.
    assert_eq!(unsafe { symmwin_alloc(-1, 4096, &mut ptr) }, SymmwinOk);
    let mut window = null_mut();
    // SAFETY: a live allocation, a NUL-terminated name, a writable out.
    let status = unsafe { symmwin_rendezvous(ptr, name.as_ptr(), -1, 64, &mut window) };
    assert_ne!(status, SymmwinOk);
    let message = last_error();
    assert!(message.contains("failed in the c10d store"), "{message}");
    assert!(message.contains("(c10d store: set("), "{message}");
    assert!(message.contains(reason), "{message}");
    assert_eq!(symmwin_free(ptr), SymmwinOk);
}

#[test]
fn ranks_travel_at_64_bits_and_the_core_refuses_them_whole() {
    let (ptr, window) = host_window("abi-wide-ranks", 4096);
    let opts = SymmwinOpOptions {
        engine: 0,
        timeout_ms: 100,
        stream: null_mut(),
    };
    let buf = whole(window, 64);
    // Narrowed to 32 bits, each of these would be rank 0 (the only rank there is) or 1.
    for rank in [1i64 << 32, (1 << 33) + 1, -(1 << 32)] {
        let needle = |what| format!("{what} {rank} is not a rank of the group");
        // SAFETY: a live window, readable options.
        unsafe {
            assert_refused(symmwin_op_broadcast(buf, rank, &opts), &needle("root"));
            assert_refused(symmwin_op_put_get(buf, rank, 1, &opts), &needle("peer"));
            assert_refused(symmwin_op_put_get(buf, rank, 0, &opts), &needle("peer"));
            let sig = SymmwinOperand {
                offset: 64,
                len: 8,
                ..buf
            };
            let status = symmwin_op_put_with_signal(buf, sig, 1, rank, &opts);
            assert_refused(status, &needle("peer"));
            let src = [0u8; 64];
            let status = symmwin_op_put_signal(src.as_ptr().cast(), 64, buf, rank, &opts);
            assert_refused(status, &needle("peer"));
            assert_refused(symmwin_op_wait_signal(window, rank, &opts), &needle("peer"));
            let (ins, roots) = ([buf], [rank]);
            let out = SymmwinOperand { offset: 128, ..buf };
            let status = symmwin_op_tile_reduce(
                ins.as_ptr(),
                1,
                roots.as_ptr(),
                out,
                1,
                16,
                16,
                SYMMWIN_ELEM_F32,
                c"sum".as_ptr(),
                &opts,
            );
            assert_refused(status, &needle("root"));
        }
    }
    // SAFETY: as above; rank 0 itself is fine.
    let status = unsafe { symmwin_op_put_get(buf, 0, 1, &opts) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    release_host_window(ptr, window);
}

#[test]
fn aliased_all_to_all_operands_and_sliced_elements_are_refused() {
    let (ptr, window) = host_window("abi-a2a-alias", 4096);
    // SAFETY: a live window for both operands, default options.
    unsafe {
        let status = symmwin_op_all_to_all(whole(window, 64), whole(window, 64), 4, null());
        assert_refused(
            status,
            "out (bytes 0..64 of its window) overlaps input (bytes 0..64)",
        );
        let shifted = SymmwinOperand {
            offset: 32,
            ..whole(window, 64)
        };
        let status = symmwin_op_all_to_all(whole(window, 64), shifted, 4, null());
        assert_refused(status, "overlaps input");
        let apart = SymmwinOperand {
            offset: 64,
            ..whole(window, 64)
        };
        let status = symmwin_op_all_to_all(whole(window, 64), apart, 4, null());
        assert_eq!(status, SymmwinOk, "{}", last_error());
        let status = symmwin_op_all_to_all(
            whole(window, 6),
            SymmwinOperand { len: 6, ..apart },
            4,
            null(),
        );
        assert_refused(status, "6 bytes are not a whole number of 4-byte elements");
    }
    release_host_window(ptr, window);
}

#[test]
fn a_wait_for_signal_on_memory_no_peer_can_write_is_refused_at_once() {
    let name = c("abi-wait-for-signal");
    let (ptr, window) = {
        assert_eq!(host_group(&name, None, 1), SymmwinOk, "{}", last_error());
        let mut ptr = null_mut();
        // SAFETY: `ptr` is writable.
        assert_eq!(unsafe { symmwin_alloc(-1, 4096, &mut ptr) }, SymmwinOk);
        let mut window = null_mut();
        // SAFETY: a live allocation, a NUL-terminated name, a writable out.
        let status = unsafe { symmwin_rendezvous(ptr, name.as_ptr(), -1, 64, &mut window) };
        assert_eq!(status, SymmwinOk, "{}", last_error());
        (ptr, window)
    };
    let opts = SymmwinOpOptions {
        engine: 0,
        timeout_ms: 5_000,
        stream: null_mut(),
    };
    let wait = |word: *mut c_void, peer: i64| {
        let started = std::time::Instant::now();
        // SAFETY: a NUL-terminated name; the word is only compared before any wait.
        let status = unsafe { symmwin_op_wait_for_signal(word, name.as_ptr(), -1, 1, peer, &opts) };
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "it waited"
        );
        status
    };
    let mut stack_word = 0u64;
    let stack = (&raw mut stack_word).cast::<c_void>();
    assert_refused(wait(stack, 0), "is not symmetric memory of group");
    let mut plain = vec![0u64; 4];
    assert_refused(
        wait(plain.as_mut_ptr().cast(), 0),
        "is not symmetric memory",
    );
    for peer in [1, -1, 1 << 32] {
        assert_refused(
            wait(ptr, peer),
            &format!("peer {peer} is not a rank of the group"),
        );
    }
    // SAFETY: a NUL-terminated name for a group never registered.
    let status =
        unsafe { symmwin_op_wait_for_signal(ptr, c"abi-nowhere".as_ptr(), -1, 1, 0, &opts) };
    assert_refused(status, "group abi-nowhere is not registered");
    // Symmetric words whose signal has come: an allocation and this rank's pad.
    let mut pad = null_mut();
    // SAFETY: a live window and a writable out.
    let status = unsafe { symmwin_window_peer_ptr(window, SYMMWIN_PAD_PTRS, 0, &mut pad) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    for word in [ptr, pad] {
        // SAFETY: an 8-byte aligned word of a live allocation or pad of this process.
        unsafe { word.cast::<u64>().write_volatile(1) };
        assert_eq!(wait(word, 0), SymmwinOk, "{}", last_error());
        // SAFETY: as above; the wait consumed the signal.
        assert_eq!(unsafe { word.cast::<u64>().read_volatile() }, 0);
    }
    release_host_window(ptr, window);
}

#[test]
fn devices_below_host_are_refused_free_of_null_is_a_no_op_and_success_clears_the_error() {
    for device in [-2, -3, c_int::MIN] {
        let mut ptr = null_mut();
        // SAFETY: `ptr` is writable.
        let status = unsafe { symmwin_alloc(device, 4096, &mut ptr) };
        assert_refused(
            status,
            &format!("device {device} is neither a CUDA device (0 or more) nor host memory (-1)"),
        );
        assert!(ptr.is_null());
    }
    assert!(!last_error().is_empty());
    assert_eq!(symmwin_free(null_mut()), SymmwinOk, "{}", last_error());
    assert_eq!(last_error(), "", "a success leaves no stale message");
    // A failure then a success of another entry point: the message goes too.
    assert_refused(
        symmwin_free(8usize as *mut c_void),
        "is not a live symmwin allocation",
    );
    assert_eq!(symmwin_init(), SymmwinOk);
    assert_eq!(last_error(), "");
    assert_eq!(symmwin_abi_version(), SYMMWIN_ABI_VERSION);
}

#[test]
fn dtype_codes_are_one_per_dtype_whatever_the_spelling() {
    let code = |name: &str| {
        let name = c(name);
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { symmwin_dtype_code(name.as_ptr()) }
    };
    assert_eq!(code("Float"), code("float32"));
    assert_eq!(code("torch.float32"), code("float32"));
    assert_eq!(code("float32"), symmwin::ops::DType::FLOAT32.code());
    assert_ne!(code("Float"), code("Int"));
    assert_ne!(code("float6_a"), code("float6_b"));
    assert_ne!(code("float6_a"), 0);
    // SAFETY: NULL is allowed: untyped bytes.
    assert_eq!(unsafe { symmwin_dtype_code(null()) }, 0);
    // A typed operand of a dtype whose size is not the named element size is refused.
    let (ptr, window) = host_window("abi-dtype", 4096);
    let typed = SymmwinOperand {
        dtype: code("float64"),
        ..whole(window, 64)
    };
    // SAFETY: a live window for both operands; NULL options are the defaults.
    let status = unsafe { symmwin_op_all_to_all(typed, typed, 4, null()) };
    assert_refused(
        status,
        "elements of 4 bytes, but float64 elements are 8 bytes",
    );
    let untyped = whole(window, 64);
    // SAFETY: as above.
    let status = unsafe { symmwin_op_all_to_all(typed, untyped, 8, null()) };
    assert_refused(status, "input is float64 but out is untyped");
    release_host_window(ptr, window);
}
