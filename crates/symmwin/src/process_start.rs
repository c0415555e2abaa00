//! Telling a process from a later one given the same pid, for pids read from the store.
//!
//! The store is one that other local users may write, and a pid is reused once its
//! process is gone, so a pid alone proves nothing: a record also carries its writer's
//! start time (clock ticks since boot, `/proc/<pid>/stat`) and uid, and is believed
//! only on the kernel and in the pid namespace that wrote it (boot id and namespace
//! inode, see `locality`). A process is the writer when its pid, start
//! time and real uid all match; anything else under that pid is another process.

use std::time::{SystemTime, UNIX_EPOCH};

/// What `/proc` says of the process a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// A process with the record's pid, start time and uid is running.
    Alive,
    /// No such process: none has the pid, or the one that has it is another.
    Gone,
    /// `/proc` cannot say (hidden by `hidepid`, or the record has no start time).
    Unknown,
}

/// Start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`); `Err(true)` when there is no such process or it has ended
/// (a zombie, not reaped yet), `Err(false)` when `/proc` cannot say.
pub(crate) fn start_time(pid: u32) -> Result<u64, bool> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(e) => return Err(matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))),
    };
    match parse_stat(&stat) {
        Some(("Z" | "X" | "x", _)) => Err(true),
        Some((_, started)) => Ok(started),
        None => Err(false),
    }
}

/// The state (field 3) and start time (field 22) of a `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces or ')': the
    // fields after the last ')' start at field 3.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    let started = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, started))
}

/// Real uid of process `pid` (`/proc/<pid>/status`, which, unlike the owner of
/// `/proc/<pid>`, does not turn to root for a process that is not dumpable).
fn real_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// This process's start time, as [`liveness`] compares it (0 when `/proc` cannot say).
pub(crate) fn own_start_time() -> u64 {
    static OWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| start_time(std::process::id()).unwrap_or(0))
}

/// Whether the process that wrote a record naming `pid`, `start_time` (0: unknown)
/// and `uid` is still running, asked of this kernel and pid namespace (the caller
/// checks the record comes from them).
pub(crate) fn liveness(pid: u32, start_time_ticks: u64, uid: u32) -> Liveness {
    if pid == 0 {
        return Liveness::Gone;
    }
    let started = match start_time(pid) {
        Ok(started) => started,
        Err(true) => return Liveness::Gone,
        Err(false) => return Liveness::Unknown,
    };
    if start_time_ticks == 0 {
        return Liveness::Unknown;
    }
    if started != start_time_ticks {
        return Liveness::Gone;
    }
    match real_uid(pid) {
        Some(real) if real == uid => Liveness::Alive,
        Some(_) => Liveness::Gone,
        None => Liveness::Unknown,
    }
}

/// Milliseconds since the epoch: when a record was written, compared with when a call
/// began (records are compared only on the kernel that wrote them, so one clock).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> u32 {
        rustix::process::getuid().as_raw()
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_or_uid_is_another_process() {
        let pid = std::process::id();
        let started = own_start_time();
        assert_ne!(started, 0);
        assert_eq!(liveness(pid, started, uid()), Liveness::Alive);
        assert_eq!(liveness(pid, started + 1, uid()), Liveness::Gone);
        assert_eq!(liveness(pid, started, uid() + 1), Liveness::Gone);
        assert_eq!(liveness(pid, 0, uid()), Liveness::Unknown);
    }

    #[test]
    fn a_process_that_ended_is_gone_reaped_or_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let pid = child.id();
        let started = start_time(pid).unwrap();
        assert_eq!(liveness(pid, started, uid()), Liveness::Alive);
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert_eq!(liveness(pid, started, uid()), Liveness::Gone, "a zombie");
        child.wait().unwrap();
        assert_eq!(liveness(pid, started, uid()), Liveness::Gone);
        assert_eq!(liveness(0, started, uid()), Liveness::Gone);
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let fields: Vec<String> = (4..=22).map(|f| f.to_string()).collect();
        let stat = format!("42 (a) b (c) S {} 23 24", fields.join(" "));
        assert_eq!(parse_stat(&stat), Some(("S", 22)));
        assert_eq!(parse_stat("42 (sleep) S 1"), None);
    }
}
