//! Configuration from the environment, `symmwin_init` and the version string.

use std::ffi::{c_char, CString};
use std::sync::LazyLock;

use symmwin::{Config, ErrorKind};

use crate::args::timeout;
use crate::last_error::guard;
use crate::status::SymmwinStatus::{self, *};

pub(crate) fn config() -> symmwin::Result<Config> {
    // Keep the reason alone: `Error::invalid` adds the prefix again.
    static CONFIG: LazyLock<Result<Config, String>> = LazyLock::new(|| {
        let reason = |e: symmwin::Error| match e.into_kind() {
            ErrorKind::InvalidArgument(reason) => reason,
            other => other.to_string(),
        };
        symmwin::adapter::init_logging(None).map_err(reason)?;
        Config::from_env().map_err(reason)
    });
    CONFIG.clone().map_err(symmwin::Error::invalid)
}

/// The configuration of one group: its waits follow [`Config::group_timeout`].
pub(crate) fn group_config(timeout_ms: u64) -> symmwin::Result<Config> {
    let mut config = config()?;
    config.timeout = config.group_timeout(timeout(timeout_ms));
    Ok(config)
}

/// Check the `SYMMWIN_*` environment and set up `SYMMWIN_LOG`, so that a bad value is
/// reported when the caller starts (e.g. at `import symmwin`), not at its first
/// rendezvous. Every other call does the same on first use.
#[no_mangle]
pub extern "C" fn symmwin_init() -> SymmwinStatus {
    guard(|| config().map(|_| SymmwinOk))
}

/// The library's version and the git commit it was built from, e.g.
/// `"0.1.0+g1a2b3c4d5e6f"` (`.dirty` when built from uncommitted changes; no `+g...`
/// when built outside a git checkout). A static string.
#[no_mangle]
pub extern "C" fn symmwin_version() -> *const c_char {
    static VERSION: LazyLock<CString> =
        LazyLock::new(|| CString::new(symmwin::BUILD_VERSION).unwrap_or_default());
    VERSION.as_ptr()
}
