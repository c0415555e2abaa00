//! Runtime configuration, read from `SYMMWIN_*` environment variables.
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SYMMWIN_TIMEOUT_MS` | `60000`, or a process group's timeout ([`Config::group_timeout`]) | how long a wait given no limit of its own waits for peers |
//! | `SYMMWIN_HANDLE_TYPE` | `auto` | `auto`, `fd` or `fabric` (CUDA provider) |
//! | `SYMMWIN_SOCKET_DIR` | `$XDG_RUNTIME_DIR/symmwin`, else `/tmp/symmwin-<uid>` | private directory for exchange sockets |
//! | `SYMMWIN_LOG` | unset: warnings only in the CLI, nothing in the library | log filter (tracing `EnvFilter` syntax, e.g. `debug`); see [`crate::logging`] |

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
    /// True when `timeout` was set by `SYMMWIN_TIMEOUT_MS`: it then wins over a
    /// process group's own timeout.
    pub timeout_from_env: bool,
    /// CUDA handle type choice.
    pub handle: HandlePreference,
    /// Directory holding the exchange sockets; created `0700` if missing.
    pub socket_dir: PathBuf,
}

/// Default wait for peers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Config {
    /// Read the environment. Bad values are errors, not silently ignored.
    pub fn from_env() -> Result<Self> {
        let timeout_from_env = std::env::var_os("SYMMWIN_TIMEOUT_MS").is_some();
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
        Ok(Config {
            timeout,
            timeout_from_env,
            handle,
            socket_dir,
        })
    }
}

impl Config {
    /// How long a group's rendezvous and host-side waits given no timeout of their
    /// own wait for peers: `SYMMWIN_TIMEOUT_MS` when set, else the timeout of the
    /// process group the group stands for (`init_process_group(timeout=...)` under
    /// torch), else [`DEFAULT_TIMEOUT`].
    pub fn group_timeout(&self, process_group: Option<Duration>) -> Duration {
        match process_group {
            Some(t) if !self.timeout_from_env && !t.is_zero() => t,
            _ => self.timeout,
        }
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
            timeout_from_env: false,
            handle: HandlePreference::Auto,
            socket_dir: default_socket_dir(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_timeout_applies_unless_the_environment_sets_one() {
        let group = Some(Duration::from_secs(5));
        let unset = Config::default();
        assert_eq!(unset.group_timeout(group), Duration::from_secs(5));
        assert_eq!(unset.group_timeout(None), DEFAULT_TIMEOUT);
        assert_eq!(unset.group_timeout(Some(Duration::ZERO)), DEFAULT_TIMEOUT);
        let set = Config {
            timeout: Duration::from_millis(700),
            timeout_from_env: true,
            ..Config::default()
        };
        assert_eq!(set.group_timeout(group), Duration::from_millis(700));
    }
}
