//! Runtime configuration, read from `SYMMWIN_*` environment variables.
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SYMMWIN_TIMEOUT_MS` | `60000` | how long a rendezvous or host-side wait waits for peers |
//! | `SYMMWIN_HANDLE_TYPE` | `auto` | `auto`, `fd` or `fabric` (CUDA provider) |
//! | `SYMMWIN_SOCKET_DIR` | `$XDG_RUNTIME_DIR/symmwin`, else `/tmp/symmwin-<uid>` | private directory for exchange sockets |
//! | `SYMMWIN_LOG` | `warn` | log filter (tracing `EnvFilter` syntax) |
//! | `SYMMWIN_HOST_ID` | unset | ranks with different ids never map each other (see `docs/multi-node.md`) |

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
    /// CUDA handle type choice.
    pub handle: HandlePreference,
    /// Directory holding the exchange sockets; created `0700` if missing.
    pub socket_dir: PathBuf,
    /// Splits one machine into several hosts: ranks with different ids are never
    /// mapped and reach each other through the process group (`None`: one id for all).
    pub host_id: Option<String>,
}

/// Default wait for peers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Config {
    /// Read the environment. Bad values are errors, not silently ignored.
    pub fn from_env() -> Result<Self> {
        let timeout = match std::env::var("SYMMWIN_TIMEOUT_MS") {
            Ok(v) => {
                let ms: u64 = v.trim().parse().map_err(|_| {
                    Error::invalid(format!("SYMMWIN_TIMEOUT_MS={v:?} is not a number"))
                })?;
                if ms == 0 {
                    return Err(Error::invalid("SYMMWIN_TIMEOUT_MS must be positive"));
                }
                Duration::from_millis(ms)
            }
            Err(_) => DEFAULT_TIMEOUT,
        };
        let handle = match std::env::var("SYMMWIN_HANDLE_TYPE") {
            Ok(v) => v.parse()?,
            Err(_) => HandlePreference::Auto,
        };
        let socket_dir = match std::env::var_os("SYMMWIN_SOCKET_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => default_socket_dir(),
        };
        let host_id = std::env::var("SYMMWIN_HOST_ID")
            .ok()
            .filter(|id| !id.trim().is_empty());
        Ok(Config {
            timeout,
            handle,
            socket_dir,
            host_id,
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
            handle: HandlePreference::Auto,
            socket_dir: default_socket_dir(),
            host_id: None,
        }
    }
}
