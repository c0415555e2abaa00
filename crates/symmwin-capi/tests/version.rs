//! The C ABI's version string: what results files record as the build that ran.

use std::ffi::CStr;

#[test]
fn the_version_names_the_release_and_the_commit() {
    // SAFETY: symmwin_version returns a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(symmwin_capi::symmwin_version()) }
        .to_str()
        .unwrap();
    assert_eq!(version, symmwin::BUILD_VERSION);
    assert!(version.starts_with(env!("CARGO_PKG_VERSION")), "{version}");
    // Built from a git checkout (as CI is), the commit follows the release.
    if std::process::Command::new("git")
        .arg("rev-parse")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(version.contains("+g"), "{version}");
    }
}

#[test]
fn a_bad_setting_is_reported_by_init_with_one_prefix() {
    // The configuration is read once per process: this test binary sets it first.
    std::env::set_var("SYMMWIN_TIMEOUT_MS", "soon");
    assert_eq!(
        symmwin_capi::symmwin_init(),
        symmwin_capi::SymmwinStatus::SymmwinInvalidArgument
    );
    // SAFETY: the last error is a NUL-terminated string valid until the next call.
    let message = unsafe { CStr::from_ptr(symmwin_capi::symmwin_last_error()) }
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        message,
        r#"symmwin [argument]: invalid argument: SYMMWIN_TIMEOUT_MS="soon" is not a number; allowed: a whole number of milliseconds above 0"#
    );
}
