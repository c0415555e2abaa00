//! The processes a test of the `symmwin` command looks at: a supervisor's children,
//! and (for a test that made itself a child subreaper) what was left to it.
#![allow(dead_code)] // each test binary uses a part

use std::time::Duration;

/// Pids of the running children of `parent` (from /proc).
pub fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the comm may hold spaces, so split after ')'.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            fields.get(1) == Some(&parent.to_string().as_str()) && fields.first() != Some(&"Z")
        })
        .collect()
}

/// Children of this process that are left (or were handed to it): 0 when none.
pub fn leftover_children() -> usize {
    let mut count = 0;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG writes the status into our own integer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            -1 => return count, // ECHILD: no children at all
            0 => {
                // A live child: it was forked, and dies with its supervisor soon.
                count += 1;
                std::thread::sleep(Duration::from_millis(50));
                if count > 100 {
                    return count;
                }
            }
            _ => count += 1,
        }
    }
}
