//! Runtime configuration, read from `SYMMWIN_*` environment variables.
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SYMMWIN_TIMEOUT_MS` | `60000` | how long a wait given no limit of its own waits for peers: rendezvous, host-side and device-side waits |
//! | `SYMMWIN_HANDLE_TYPE` | `auto` | `auto`, `fd` or `fabric` (CUDA provider) |
//! | `SYMMWIN_SOCKET_DIR` | `$XDG_RUNTIME_DIR/symmwin`, else `/tmp/symmwin-<uid>` | private directory for exchange sockets |
//! | `SYMMWIN_LOG` | `warn` | log filter (tracing `EnvFilter` syntax) |
//!
//! One rule for every wait: an explicit timeout (`timeout_ms` > 0) is the limit. A wait
//! without one (`timeout_ms` 0, torch's default) uses `SYMMWIN_TIMEOUT_MS` when it is
//! set. When it is not, the rendezvous and host-side waits use the group's timeout, and
//! device-side waits use [`DEFAULT_DEVICE_TIMEOUT`] (60 s): a device wait that runs out
//! traps and loses the CUDA context, so its limit says how long a missing peer may hang
//! the GPU before the job is told which rank it is.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Which CUDA shareable-handle type to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlePreference {
    /// Probe: fabric where a real create + export works, POSIX fd otherwise.
    Auto,
    /// POSIX file descriptors passed over Unix sockets.
    Fd,
    /// Fabric handles (needs an IMEX channel).
    Fabric,
}

impl std::str::FromStr for HandlePreference {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(HandlePreference::Auto),
            "fd" | "posix" | "posix_fd" => Ok(HandlePreference::Fd),
            "fabric" => Ok(HandlePreference::Fabric),
            other => Err(Error::invalid(format!(
                "SYMMWIN_HANDLE_TYPE={other:?}: expected auto, fd or fabric"
            ))),
        }
    }
}

/// Settings shared by every group of a process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Upper bound on any wait for peers.
    pub timeout: Duration,
    /// Limit of a device-side wait given none (`SYMMWIN_TIMEOUT_MS`, else
    /// [`DEFAULT_DEVICE_TIMEOUT`]).
    pub device_timeout: Duration,
    /// CUDA handle type choice.
    pub handle: HandlePreference,
    /// Directory holding the exchange sockets; created `0700` if missing.
    pub socket_dir: PathBuf,
}

/// Default wait for peers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default limit of a device-side wait (barrier, put_signal, wait_signal, device ops)
/// given none, when `SYMMWIN_TIMEOUT_MS` is not set.
pub const DEFAULT_DEVICE_TIMEOUT: Duration = Duration::from_secs(60);

impl Config {
    /// Read the environment. Bad values are errors, not silently ignored.
    pub fn from_env() -> Result<Self> {
        let configured = match std::env::var("SYMMWIN_TIMEOUT_MS") {
            Ok(v) => {
                let ms: u64 = v.trim().parse().map_err(|_| {
                    Error::invalid(format!("SYMMWIN_TIMEOUT_MS={v:?} is not a number"))
                })?;
                if ms == 0 {
                    return Err(Error::invalid("SYMMWIN_TIMEOUT_MS must be positive"));
                }
                Some(Duration::from_millis(ms))
            }
            Err(_) => None,
        };
        let timeout = configured.unwrap_or(DEFAULT_TIMEOUT);
        let device_timeout = configured.unwrap_or(DEFAULT_DEVICE_TIMEOUT);
        let handle = match std::env::var("SYMMWIN_HANDLE_TYPE") {
            Ok(v) => v.parse()?,
            Err(_) => HandlePreference::Auto,
        };
        let socket_dir = match std::env::var_os("SYMMWIN_SOCKET_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => default_socket_dir(),
        };
        Ok(Config {
            timeout,
            device_timeout,
            handle,
            socket_dir,
        })
    }
}

fn default_socket_dir() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("symmwin"),
        _ => std::env::temp_dir().join(format!("symmwin-{uid}")),
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: DEFAULT_TIMEOUT,
            device_timeout: DEFAULT_DEVICE_TIMEOUT,
            handle: HandlePreference::Auto,
            socket_dir: default_socket_dir(),
        }
    }
}
