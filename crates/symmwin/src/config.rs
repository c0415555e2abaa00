//! Runtime configuration, read from `SYMMWIN_*` environment variables.
//!
//! [`SETTINGS`] is the one table of every variable: its default, what it accepts and
//! what it does. The README's configuration table is checked against it by a test.
//! [`Config::from_env`] checks every variable in it at once, without side effects (no
//! directory is created), and names each bad one with its value and what is allowed;
//! `import symmwin` and the `symmwin` command call it before anything else, so a bad
//! value is reported before any rank starts.
//!
//! One rule for every wait: an explicit timeout (`timeout_ms` > 0) is the limit. A wait
//! without one (`timeout_ms` 0, torch's default) uses `SYMMWIN_TIMEOUT_MS` when it is
//! set. When it is not, the rendezvous and host-side waits use the process group's
//! timeout ([`Config::group_timeout`]; [`DEFAULT_TIMEOUT`], 60 s, without one), and
//! device-side waits use [`DEFAULT_DEVICE_TIMEOUT`] (60 s): a device wait that runs out
//! traps and loses the CUDA context, so its limit says how long a missing peer may hang
//! the GPU before the job is told which rank it is.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use symmwin_device::device_timeout::DEFAULT_DEVICE_TIMEOUT;
use symmwin_device::error::{Error, Result};
pub use symmwin_device::provider::HandlePreference;

mod warnings;

/// One `SYMMWIN_*` variable, as the README's configuration table lists it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The variable's name.
    pub name: &'static str,
    /// What applies when it is unset (or set to the empty string).
    pub default: &'static str,
    /// The values it accepts.
    pub allowed: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every variable symmwin reads at run time. An empty value means unset.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "SYMMWIN_TIMEOUT_MS",
        default: "the process group's timeout, else 60000",
        allowed: "a whole number of milliseconds above 0",
        meaning: "how long a wait given no limit of its own waits for peers: \
                  rendezvous, host-side and device-side waits",
    },
    Setting {
        name: "SYMMWIN_HANDLE_TYPE",
        default: "auto",
        allowed: "auto, fd or fabric",
        meaning: "CUDA shareable-handle type; auto probes fabric, then POSIX fd",
    },
    Setting {
        name: "SYMMWIN_OPS_ENGINE",
        default: "auto",
        allowed: "auto, sm or copy_engine",
        meaning: "engine of the ops whose sizes the host knows (see docs/ops.md)",
    },
    Setting {
        name: "SYMMWIN_SOCKET_DIR",
        default: "$XDG_RUNTIME_DIR/symmwin, else /tmp/symmwin-<uid>",
        allowed: "an absolute path to a directory this user owns (mode 0700) or can create",
        meaning: "private directory for the exchange sockets; created 0700 at the first \
                  rendezvous",
    },
    Setting {
        name: "SYMMWIN_STORE_DIR",
        default: "unset: no file store",
        allowed: "an absolute path to a directory this user owns (mode 0700) or can create",
        meaning: "directory of the file store (`FileStore::from_env`) for jobs without a \
                  process group store",
    },
    Setting {
        name: "SYMMWIN_LOG",
        default: "unset: warnings only in the CLI, nothing in the library",
        allowed: "a tracing filter, e.g. debug or symmwin=trace,warn",
        meaning: "log to stderr (colours only on a terminal)",
    },
    Setting {
        name: "SYMMWIN_HOST_ID",
        default: "unset: one id for every rank",
        allowed: "any text without surrounding whitespace or control characters",
        meaning: "ranks with different ids never map each other and go through the \
                  process group (see docs/multi-node.md)",
    },
    Setting {
        name: "SYMMWIN_AUTOLOAD",
        default: "0",
        allowed: "0 or 1",
        meaning: "1: an installed symmwin makes SYMMWIN and SYMMWIN_HOST torch's symmetric \
                  memory backends at `import torch` in every process (torch's \
                  `torch.backends` entry point; see docs/clients.md)",
    },
    Setting {
        name: "SYMMWIN_DEBUG_FREE",
        default: "0",
        allowed: "0 or 1",
        meaning: "1: freed windows are never reused but unmapped, so a use after free \
                  faults (debugging; slower)",
    },
    Setting {
        name: "SYMMWIN_DEBUG_FREE_KEEP",
        default: "1024",
        allowed: "a whole number above 0",
        meaning: "with SYMMWIN_DEBUG_FREE=1, how many freed windows stay reserved: a \
                  pointer kept across the last N frees faults (oldest released first)",
    },
];

/// Settings shared by every group of a process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Upper bound on any wait for peers.
    pub timeout: Duration,
    /// Limit of a device-side wait given none (`SYMMWIN_TIMEOUT_MS`, else
    /// [`DEFAULT_DEVICE_TIMEOUT`]).
    pub device_timeout: Duration,
    /// True when `timeout` was set by `SYMMWIN_TIMEOUT_MS`: it then wins over a
    /// process group's own timeout.
    pub timeout_from_env: bool,
    /// CUDA handle type choice.
    pub handle: HandlePreference,
    /// Directory holding the exchange sockets; created `0700` if missing.
    pub socket_dir: PathBuf,
    /// Splits one machine into several hosts: ranks with different ids are never
    /// mapped and reach each other through the process group (`None`: one id for all).
    pub host_id: Option<String>,
    /// `SYMMWIN_DEBUG_FREE=1`: freed windows are unmapped instead of reused.
    pub debug_free: bool,
}

/// Default wait for peers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The `SYMMWIN_LOG` filter `spec` stands for, or why it is none ("is not a log filter (...)").
pub(crate) fn log_filter(spec: &str) -> std::result::Result<tracing_subscriber::EnvFilter, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(spec)
        .map_err(|e| format!("is not a log filter ({e})"))
}

/// `NAME="value" <why>; allowed: <what the table allows>`.
pub(crate) fn refusal(name: &str, value: &str, why: &str) -> String {
    let allowed = SETTINGS
        .iter()
        .find(|s| s.name == name)
        .map_or("", |s| s.allowed);
    format!("{name}={value:?} {why}; allowed: {allowed}")
}

/// The variables' values, read through `lookup` (the environment, or a test's table).
struct Vars<'a> {
    lookup: &'a dyn Fn(&str) -> Option<OsString>,
    problems: Vec<String>,
}

impl Vars<'_> {
    /// The value of `name`, `None` when unset or empty; a value that is not UTF-8 is
    /// a problem.
    fn text(&mut self, name: &str) -> Option<String> {
        let raw = (self.lookup)(name).filter(|v| !v.is_empty())?;
        match raw.into_string() {
            Ok(v) => Some(v),
            Err(raw) => {
                let shown = raw.to_string_lossy().into_owned();
                self.problems
                    .push(refusal(name, &shown, "is not valid UTF-8"));
                None
            }
        }
    }

    /// Run `check` on the value of `name` when it is set; its error is a problem.
    fn parse<T>(
        &mut self,
        name: &str,
        check: impl FnOnce(&str) -> std::result::Result<T, String>,
    ) -> Option<T> {
        let value = self.text(name)?;
        check(&value)
            .map_err(|why| self.problems.push(refusal(name, &value, &why)))
            .ok()
    }
}

fn timeout_ms(value: &str) -> std::result::Result<Duration, String> {
    let v = value.trim();
    match v.parse::<u64>() {
        Ok(0) => Err("is zero: a wait needs a limit above 0".into()),
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) if v.starts_with('-') && v[1..].bytes().all(|b| b.is_ascii_digit()) => {
            Err("is negative".into())
        }
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            Err("is too large".into())
        }
        Err(_) => Err("is not a number".into()),
    }
}

fn host_id(value: &str) -> std::result::Result<String, String> {
    if value.trim() != value {
        return Err(
            "has surrounding whitespace (ids that differ only in it would be \
                    different hosts)"
                .into(),
        );
    }
    if value.chars().any(char::is_control) {
        return Err("contains a control character".into());
    }
    Ok(value.to_owned())
}

fn switch(value: &str) -> std::result::Result<bool, String> {
    match value.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("is not a switch".into()),
    }
}

/// A directory setting, checked without creating anything: an absolute path, naming a
/// private directory of ours (owner and mode checked, as at its first use) or a place
/// where one can be created. `what` and `guards` name it in the reason.
pub(crate) fn directory(
    value: &str,
    what: &str,
    guards: &str,
) -> std::result::Result<PathBuf, String> {
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(
            "is a relative path: every rank would resolve it against its own \
                    working directory"
                .into(),
        );
    }
    let existing = path
        .ancestors()
        .find(|p| std::fs::symlink_metadata(p).is_ok())
        .unwrap_or(Path::new("/"));
    if existing == path {
        return match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => match crate::private_dir::problem(&m, what, guards) {
                Some(why) => Err(why),
                None => Ok(path.to_owned()),
            },
            Ok(m) if m.file_type().is_symlink() => {
                Err("is a symlink: symmwin refuses one (another user could retarget it)".into())
            }
            _ => Err("exists and is not a directory".into()),
        };
    }
    match std::fs::metadata(existing) {
        Ok(m) if !m.is_dir() => Err(format!(
            "cannot be created: {} is not a directory",
            existing.display()
        )),
        _ => match creatable_in(existing) {
            Some(why) => Err(format!("cannot be created: {} {why}", existing.display())),
            None => Ok(path.to_owned()),
        },
    }
}

/// Why no directory can be created in `dir`, or `None` when one can: a kernel
/// filesystem (as root, `access` allows what `mkdir` in /proc then refuses), a
/// read-only mount, or no write permission.
fn creatable_in(dir: &Path) -> Option<&'static str> {
    use rustix::fs::{Access, StatVfsMountFlags};
    // PROC, SYSFS, CGROUP, CGROUP2, DEBUGFS, SECURITYFS, TRACEFS superblock magics.
    const KERNEL_FS: [i64; 7] = [
        0x9fa0,
        0x6265_6572,
        0x0027_e0eb,
        0x6367_7270,
        0x6462_6720,
        0x7363_6673,
        0x7472_6163,
    ];
    if let Ok(fs) = rustix::fs::statfs(dir) {
        // f_type is i64 here, another integer type elsewhere.
        #[allow(clippy::unnecessary_cast)]
        let kind = fs.f_type as i64;
        if KERNEL_FS.contains(&kind) {
            return Some("is on a kernel filesystem (proc, sysfs, cgroup)");
        }
    }
    if let Ok(vfs) = rustix::fs::statvfs(dir) {
        if vfs.f_flag.contains(StatVfsMountFlags::RDONLY) {
            return Some("is on a read-only mount");
        }
    }
    if rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK).is_err() {
        return Some("is not writable by this user");
    }
    None
}

impl Config {
    /// Read the environment: every variable of [`SETTINGS`] is checked, and all the bad
    /// ones are reported together. Creates nothing.
    /// Settings that do nothing (a misspelt name, a log filter selecting none of
    /// symmwin's messages) are warned about on stderr, once per process.
    pub fn from_env() -> Result<Self> {
        warnings::warn_once();
        Config::from_vars(&|name| std::env::var_os(name))
    }

    /// [`Config::from_env`] with the variables read through `lookup` instead.
    pub fn from_vars(lookup: &dyn Fn(&str) -> Option<OsString>) -> Result<Self> {
        let mut vars = Vars {
            lookup,
            problems: Vec::new(),
        };
        let configured = vars.parse("SYMMWIN_TIMEOUT_MS", timeout_ms);
        let handle = vars
            .parse("SYMMWIN_HANDLE_TYPE", |v| {
                v.parse::<HandlePreference>()
                    .map_err(|_| "is not a handle type".to_owned())
            })
            .unwrap_or(HandlePreference::Auto);
        let socket_dir = vars
            .parse("SYMMWIN_SOCKET_DIR", |v| directory(v, SOCKETS.0, SOCKETS.1))
            .unwrap_or_else(|| default_socket_dir(lookup));
        if lookup("SYMMWIN_SOCKET_DIR").is_none_or(|v| v.is_empty()) {
            check_default_socket_dir(&socket_dir, &mut vars.problems);
        }
        vars.parse("SYMMWIN_STORE_DIR", |v| {
            directory(v, "store directory", "the tokens in it")
        });
        vars.parse("SYMMWIN_LOG", |v| log_filter(v).map(drop));
        let host_id = vars.parse("SYMMWIN_HOST_ID", host_id);
        vars.parse("SYMMWIN_OPS_ENGINE", |v| {
            v.parse::<symmwin_device::engine::Engine>()
                .map_err(|_| "is not an engine".to_owned())
        });
        let debug_free = vars.parse("SYMMWIN_DEBUG_FREE", switch).unwrap_or(false);
        // Read by the Python package (symmwin._autoload); checked here with the rest.
        vars.parse("SYMMWIN_AUTOLOAD", switch);
        vars.parse(
            "SYMMWIN_DEBUG_FREE_KEEP",
            symmwin_device::debug_free::parse_keep,
        );
        if !vars.problems.is_empty() {
            return Err(Error::invalid(vars.problems.join("; ")));
        }
        Ok(Config {
            timeout: configured.unwrap_or(DEFAULT_TIMEOUT),
            device_timeout: configured.unwrap_or(DEFAULT_DEVICE_TIMEOUT),
            timeout_from_env: configured.is_some(),
            handle,
            socket_dir,
            host_id,
            debug_free,
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

/// How the socket directory is named in reasons: what it is, what it protects.
const SOCKETS: (&str, &str) = ("socket directory", "the sockets");

/// The default socket directory, when it exists, must be ours and private: another
/// local user can pre-create `/tmp/symmwin-<uid>`. Refused, never replaced by another
/// directory (every rank of this user must agree on one): the user sets
/// `SYMMWIN_SOCKET_DIR`.
fn check_default_socket_dir(dir: &Path, problems: &mut Vec<String>) {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if let Some(why) = crate::private_dir::problem(&meta, SOCKETS.0, SOCKETS.1) {
            problems.push(format!(
                "the default socket directory {} (SYMMWIN_SOCKET_DIR is unset) {why}",
                dir.display()
            ));
        }
    }
}

fn default_socket_dir(lookup: &dyn Fn(&str) -> Option<OsString>) -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    match lookup("XDG_RUNTIME_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir).join("symmwin"),
        _ => std::env::temp_dir().join(format!("symmwin-{uid}")),
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: DEFAULT_TIMEOUT,
            device_timeout: DEFAULT_DEVICE_TIMEOUT,
            timeout_from_env: false,
            handle: HandlePreference::Auto,
            socket_dir: default_socket_dir(&|name| std::env::var_os(name)),
            host_id: None,
            debug_free: false,
        }
    }
}

#[cfg(test)]
fn table<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| std::ffi::OsStr::new(v).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::testing::assert_mentions;

    fn refused(pairs: &[(&str, &str)]) -> String {
        let err = Config::from_vars(&table(pairs)).unwrap_err();
        match err.into_kind() {
            symmwin_device::error::ErrorKind::InvalidArgument(why) => why,
            other => panic!("not an argument error: {other}"),
        }
    }

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

    #[test]
    fn every_bad_value_names_its_variable_its_value_and_what_is_allowed() {
        // Each case: variable, value, and what the refusal must say.
        #[rustfmt::skip]
        let cases = [
            ("SYMMWIN_TIMEOUT_MS", "-5", "is negative; allowed: a whole number"),
            ("SYMMWIN_TIMEOUT_MS", "five", "is not a number"),
            ("SYMMWIN_TIMEOUT_MS", "0", "is zero"),
            ("SYMMWIN_TIMEOUT_MS", "99999999999999999999", "is too large"),
            ("SYMMWIN_HANDLE_TYPE", "nvlink", "allowed: auto, fd or fabric"),
            ("SYMMWIN_SOCKET_DIR", "relative/dir", "is a relative path"),
            ("SYMMWIN_SOCKET_DIR", "/proc/nope", "cannot be created: /proc is on a kernel"),
            ("SYMMWIN_STORE_DIR", "/etc/passwd", "exists and is not a directory"),
            ("SYMMWIN_STORE_DIR", "/etc/passwd/x", "/etc/passwd is not a directory"),
            ("SYMMWIN_LOG", "symmwin=loud", "is not a log filter"),
            ("SYMMWIN_HOST_ID", " node1", "has surrounding whitespace"),
            ("SYMMWIN_HOST_ID", "node1\n", "has surrounding whitespace"),
            ("SYMMWIN_HOST_ID", "no\tde", "control character"),
            ("SYMMWIN_OPS_ENGINE", "bogus", "is not an engine; allowed: auto, sm or copy_engine"),
            ("SYMMWIN_DEBUG_FREE", "yes", "is not a switch; allowed: 0 or 1"),
            ("SYMMWIN_AUTOLOAD", "on", "is not a switch; allowed: 0 or 1"),
            ("SYMMWIN_DEBUG_FREE_KEEP", "0", "is zero: at least the last free must be kept; allowed: a whole number"),
        ];
        for (name, value, expected) in cases {
            let why = refused(&[(name, value)]);
            let head = format!("{name}={value:?} ");
            assert!(why.starts_with(&head), "{name}={value:?}: {why}");
            assert!(why.contains(expected), "{name}={value:?}: {why}");
            // One prefix, not the kind's text repeated inside the reason.
            assert!(!why.contains("invalid argument"), "{why}");
        }
    }

    #[test]
    fn a_shared_or_foreign_directory_is_refused_with_its_real_mode_and_no_chmod_advice() {
        // /tmp: sticky and writable by all (1777); owned by root, or by us as root.
        for name in ["SYMMWIN_SOCKET_DIR", "SYMMWIN_STORE_DIR"] {
            let why = refused(&[(name, "/tmp")]);
            assert_mentions(&why, &["mode 1777", &format!("set {name} to a new path")]);
            assert!(!why.contains("chmod"), "{why}");
        }
        // /etc: 755, owned by root (by us too when the tests run as root).
        let why = refused(&[("SYMMWIN_SOCKET_DIR", "/etc")]);
        assert_mentions(&why, &["mode 755"]);
        assert!(!why.contains("chmod"), "{why}");
    }

    #[test]
    fn a_default_socket_directory_of_another_user_is_refused_at_once() {
        // A directory made by another user where the default would be (as root, the
        // test can make one: chown to an unused uid); otherwise "/" stands in, open to
        // others (755) and root's.
        let made = std::env::temp_dir().join(format!("symmwin-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&made).unwrap();
        let foreign =
            rustix::fs::chown(&made, Some(rustix::fs::Uid::from_raw(54_321)), None).is_ok();
        let dir = if foreign {
            made.as_path()
        } else {
            Path::new("/")
        };
        let mut problems = Vec::new();
        check_default_socket_dir(dir, &mut problems);
        let _ = std::fs::remove_dir(&made);
        let why = problems.join("; ");
        let head = format!(
            "the default socket directory {} (SYMMWIN_SOCKET_DIR is unset)",
            dir.display()
        );
        assert!(why.starts_with(&head), "{why}");
        if foreign {
            assert_mentions(
                &why,
                &["is owned by uid 54321", "no other directory is tried"],
            );
        }
        assert_mentions(&why, &["set SYMMWIN_SOCKET_DIR to a new path"]);
        assert!(!why.contains("chmod"), "{why}");
    }

    #[test]
    fn all_bad_values_are_reported_together() {
        let why = refused(&[("SYMMWIN_TIMEOUT_MS", "-5"), ("SYMMWIN_OPS_ENGINE", "x")]);
        assert_mentions(&why, &["SYMMWIN_TIMEOUT_MS", "SYMMWIN_OPS_ENGINE"]);
    }

    #[test]
    fn good_values_are_read_and_nothing_is_created() {
        let dir = std::env::temp_dir().join(format!("symmwin-cfg-{}/a/b", std::process::id()));
        let dir_text = dir.to_str().unwrap();
        let config = Config::from_vars(&table(&[
            ("SYMMWIN_TIMEOUT_MS", " 1500 "),
            ("SYMMWIN_HANDLE_TYPE", "fd"),
            ("SYMMWIN_SOCKET_DIR", dir_text),
            ("SYMMWIN_HOST_ID", "node 1"),
            ("SYMMWIN_OPS_ENGINE", "sm"),
            ("SYMMWIN_DEBUG_FREE", "1"),
            ("SYMMWIN_LOG", ""),
        ]))
        .unwrap();
        assert_eq!(config.timeout, Duration::from_millis(1500));
        assert!(config.timeout_from_env);
        assert_eq!(config.handle, HandlePreference::Fd);
        assert_eq!(config.socket_dir, dir);
        assert_eq!(config.host_id.as_deref(), Some("node 1"));
        assert!(config.debug_free);
        assert!(!dir.exists() && !dir.parent().unwrap().parent().unwrap().exists());
    }

    #[test]
    fn empty_values_mean_unset() {
        let names: Vec<(&str, &str)> = SETTINGS.iter().map(|s| (s.name, "")).collect();
        let config = Config::from_vars(&table(&names)).unwrap();
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
        assert!(config.host_id.is_none() && !config.debug_free);
    }
}
