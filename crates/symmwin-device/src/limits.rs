//! Operating-system limits a job can run into, named in its errors with the knob to
//! turn: the open-file limit (received handles are fds) and the number of memory
//! mappings (every window maps one region per rank).

use crate::error::{Error, ErrorKind, Phase};

fn read_number(path: &str) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Mappings this process has now (`None` if they cannot be counted). Counted through a
/// small buffer: near the limit, a buffer as large as the whole list may be refused.
pub fn mapping_count() -> Option<usize> {
    use std::io::Read;
    let mut maps = std::fs::File::open("/proc/self/maps").ok()?;
    let mut buf = [0u8; 16 * 1024];
    let mut lines = 0;
    loop {
        match maps.read(&mut buf) {
            Ok(0) => return Some(lines),
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Err(_) => return None,
        }
    }
}

/// Mappings below `vm.max_map_count` at which a failed mmap is blamed on it: a
/// rendezvous adds a few per rank, and the kernel counts a split as one more.
const MAP_COUNT_MARGIN: usize = 64;

/// An mmap that failed with `errno`: when it is ENOMEM and the process is at its
/// mapping limit, say so and name `vm.max_map_count`; otherwise the plain OS error.
pub fn mmap_error(phase: Phase, call: &'static str, errno: rustix::io::Errno) -> Error {
    if errno == rustix::io::Errno::NOMEM {
        let max = read_number("/proc/sys/vm/max_map_count");
        let count = mapping_count();
        let near = |max: usize| count.is_none_or(|count| count + MAP_COUNT_MARGIN >= max);
        if let Some(max) = max.filter(|&max| near(max)) {
            let count = count.map_or("about as many".to_owned(), |c| c.to_string());
            return Error::new(
                phase,
                ErrorKind::Limit(format!(
                    "{call} failed: this process has {count} memory mappings and \
                     vm.max_map_count is {max}; every window maps one region per rank, so \
                     free windows or raise the limit (sysctl -w vm.max_map_count={})",
                    max.saturating_mul(4)
                )),
            );
        }
    }
    Error::os(phase, call, errno)
}

/// The error for a round that timed out after the kernel dropped `dropped`
/// messages' fds (`MSG_CTRUNC`) while `waiting` ranks were still missing.
pub fn fd_limit_error(dropped: u64, waiting: &[usize]) -> Error {
    // Listing the fds needs one more; failing to is itself a sign that none is left.
    let open = std::fs::read_dir("/proc/self/fd").map_or("every one in use".to_owned(), |d| {
        format!("{} open", d.count())
    });
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map_or("unlimited".to_owned(), |l| l.to_string());
    Error::new(
        Phase::Exchange,
        ErrorKind::Limit(format!(
            "{dropped} handle message(s) arrived with their file descriptors dropped by the \
             kernel, because this process is at its open-file limit (RLIMIT_NOFILE {limit}, \
             {open}); raise it (`ulimit -n`) above the world size plus the fds in use. \
             Still waiting for rank(s) {}",
            crate::text::ranks(waiting)
        )),
    )
}
