//! The file store of the C ABI: made from a directory, owned by the group it is given
//! to, freed once otherwise, and its errors are the core's own.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};

use symmwin_capi::SymmwinStatus::*;
use symmwin_capi::*;

fn last_error() -> String {
    // SAFETY: symmwin_last_error returns this thread's NUL-terminated message.
    unsafe { CStr::from_ptr(symmwin_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A path of this test's own under cargo's temporary directory, absent for now.
fn fresh(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("symmwin-file-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}

fn c_path(path: &std::path::Path) -> CString {
    CString::new(path.to_str().unwrap()).unwrap()
}

fn file_store(dir: &CStr) -> (SymmwinStatus, SymmwinStore) {
    let mut store = std::mem::MaybeUninit::<SymmwinStore>::zeroed();
    // SAFETY: a NUL-terminated path and writable storage for the store; a zeroed
    // `SymmwinStore` is the empty one (NULL pointers, no callbacks).
    unsafe {
        let status = symmwin_file_store(dir.as_ptr(), store.as_mut_ptr());
        (status, store.assume_init())
    }
}

#[test]
fn a_file_store_carries_a_group_through_rendezvous_and_a_barrier() {
    let dir = fresh("group");
    let (status, store) = file_store(&c_path(&dir));
    assert_eq!(status, SymmwinOk, "{}", last_error());
    assert!(store.set.is_none() && store.release.is_some());
    let name = c"file-store-group";
    // SAFETY: a NUL-terminated name, NULL global ranks, a store from symmwin_file_store.
    let status = unsafe { symmwin_group_init(name.as_ptr(), -1, 0, 1, null(), 5000, store) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    let mut ptr = null_mut();
    // SAFETY: `ptr` is writable.
    assert_eq!(unsafe { symmwin_alloc(-1, 4096, &mut ptr) }, SymmwinOk);
    let mut window = null_mut();
    // SAFETY: a live allocation, a NUL-terminated name, a writable out.
    let status = unsafe {
        symmwin_rendezvous(
            ptr,
            name.as_ptr(),
            -1,
            SYMMWIN_DEFAULT_PAD_SIZE,
            &mut window,
        )
    };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    let mut info = SymmwinWindowInfo::default();
    // SAFETY: a live window and a writable out.
    assert_eq!(unsafe { symmwin_window_info(window, &mut info) }, SymmwinOk);
    assert_eq!(info.pad_size, symmwin::DEFAULT_PAD_SIZE);
    // SAFETY: a live window; host memory takes no stream.
    let status =
        unsafe { symmwin_window_signal(window, SYMMWIN_SIGNAL_BARRIER, 0, 0, 0, null_mut()) };
    assert_eq!(status, SymmwinOk, "{}", last_error());
    // SAFETY: the live window, released once.
    unsafe { symmwin_window_release(window) };
    assert_eq!(symmwin_free(ptr), SymmwinOk);
    // SAFETY: a NUL-terminated name.
    assert_eq!(unsafe { symmwin_release_groups(name.as_ptr()) }, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_store_never_given_to_a_group_is_freed_once() {
    let dir = fresh("free");
    let (status, mut store) = file_store(&c_path(&dir));
    assert_eq!(status, SymmwinOk, "{}", last_error());
    assert!(dir.is_dir(), "the directory is made at once");
    // SAFETY: a store no group owns; the second free finds it emptied, the third NULL.
    unsafe {
        symmwin_store_free(&mut store);
        assert!(store.ctx.is_null() && store.release.is_none());
        symmwin_store_free(&mut store);
        symmwin_store_free(null_mut());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_others_can_read_or_a_null_one_is_refused_with_the_reason() {
    let dir = fresh("open");
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (status, _) = file_store(&c_path(&dir));
    assert_eq!(status, SymmwinError);
    assert!(last_error().contains("has mode 755"), "{}", last_error());
    let mut store = std::mem::MaybeUninit::<SymmwinStore>::zeroed();
    // SAFETY: a NULL directory is what is under test; `store` is writable.
    let status = unsafe { symmwin_file_store(null(), store.as_mut_ptr()) };
    assert_eq!(status, SymmwinInvalidArgument);
    assert!(
        last_error().contains("store directory is NULL"),
        "{}",
        last_error()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
