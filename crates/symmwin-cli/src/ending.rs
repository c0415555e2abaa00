//! How a rank ended, in the words the supervisor reports: the supervisor is every
//! rank's parent, so `waitpid` tells it the exit status or the signal.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How one rank's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Exit status 0: not a failure, with a result or without one.
    Exited0,
    /// A non-zero exit status.
    ExitedWith(i32),
    /// Killed by a signal it did not catch.
    Signalled { signal: i32, core_dumped: bool },
    /// Killed by the supervisor, and why.
    Stopped(String),
}

impl Ending {
    pub fn of(status: ExitStatus) -> Ending {
        match (status.code(), status.signal()) {
            (Some(0), _) => Ending::Exited0,
            (Some(code), _) => Ending::ExitedWith(code),
            (None, Some(signal)) => Ending::Signalled {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Neither a code nor a signal: waitpid only reports those for live
            // (stopped or continued) processes, which `try_wait` does not return.
            (None, None) => Ending::ExitedWith(-1),
        }
    }

    pub fn is_failure(&self) -> bool {
        *self != Ending::Exited0
    }

    /// "was killed by signal 9 (SIGKILL)", "exited with status 1", ...
    pub fn describe(&self) -> String {
        match self {
            Ending::Exited0 => "exited 0".into(),
            Ending::ExitedWith(code) => format!("exited with status {code}"),
            Ending::Signalled {
                signal,
                core_dumped,
            } => format!(
                "was killed by signal {signal} ({}){}",
                signal_name(*signal),
                if *core_dumped { ", core dumped" } else { "" }
            ),
            Ending::Stopped(why) => format!("was stopped by symmwin: {why}"),
        }
    }
}

/// "SIGKILL" for 9: the names a user meets (kill -l), else "signal N".
pub fn signal_name(signal: i32) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    known
        .iter()
        .find(|(number, _)| *number == signal)
        .map_or_else(
            || format!("signal {signal}"),
            |(_, name)| (*name).to_owned(),
        )
}

/// "ranks 0, 2 (pids 11, 13)", at most `SHOWN` of each, then "and N more".
pub fn rank_list(ranks: &[(usize, u32)]) -> String {
    const SHOWN: usize = 8;
    let more = match ranks.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let list = |f: &dyn Fn(&(usize, u32)) -> String| {
        ranks
            .iter()
            .take(SHOWN)
            .map(f)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (word, pids) = if ranks.len() == 1 {
        ("rank", "pid")
    } else {
        ("ranks", "pids")
    };
    format!(
        "{word} {}{more} ({pids} {}{more})",
        list(&|(rank, _)| rank.to_string()),
        list(&|(_, pid)| pid.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_named_with_its_number() {
        // The raw wait status of a process killed by SIGKILL is the signal number.
        let killed = Ending::of(ExitStatus::from_raw(libc::SIGKILL));
        assert_eq!(killed.describe(), "was killed by signal 9 (SIGKILL)");
        assert!(killed.is_failure());
        let aborted = Ending::of(ExitStatus::from_raw(libc::SIGABRT | 0x80));
        assert_eq!(
            aborted.describe(),
            "was killed by signal 6 (SIGABRT), core dumped"
        );
        assert_eq!(signal_name(64), "signal 64");
    }

    #[test]
    fn exit_statuses_are_told_apart() {
        assert_eq!(Ending::of(ExitStatus::from_raw(0)), Ending::Exited0);
        assert!(!Ending::Exited0.is_failure());
        let one = Ending::of(ExitStatus::from_raw(1 << 8));
        assert_eq!(one.describe(), "exited with status 1");
    }

    #[test]
    fn long_rank_lists_are_cut() {
        assert_eq!(rank_list(&[(1, 42)]), "rank 1 (pid 42)");
        assert_eq!(rank_list(&[(0, 7), (2, 9)]), "ranks 0, 2 (pids 7, 9)");
        let many: Vec<(usize, u32)> = (0..10).map(|r| (r, 100 + r as u32)).collect();
        assert!(rank_list(&many).starts_with("ranks 0, 1, 2, 3, 4, 5, 6, 7 and 2 more (pids 100,"));
    }
}
