//! The ABI version the header and the library must agree on.

use std::ffi::c_int;

/// The version of this ABI: raised whenever a signature or a struct changes, so an
/// adapter compiled against one header refuses a library of another
/// (`symmwin_abi_version`). 2: ranks, roots and peers are `int64_t`,
/// `symmwin_op_all_to_all` takes the element size, `symmwin_op_wait_for_signal` a
/// group. 3: `SymmwinRemote` posts and waits (the core owns the transport policy).
/// 4: `SymmwinOperand` carries a dtype code (`symmwin_dtype_code`).
pub const SYMMWIN_ABI_VERSION: c_int = 4;

/// `SYMMWIN_ABI_VERSION` of the library itself, for an adapter to compare with the
/// header it was compiled against.
#[no_mangle]
pub extern "C" fn symmwin_abi_version() -> c_int {
    SYMMWIN_ABI_VERSION
}
