//! What a run needs from the machine, checked before any rank is started.
//!
//! A demo at world W with S bytes per peer gives each rank a window of 2 x S x W
//! bytes, so the job touches 2 x S x W^2 bytes of host memory (the host provider) and
//! each rank reserves W slots of that stride: 2 x S x W^2 bytes of address space. The
//! supervisor keeps two pipes and two reader threads per rank; each rank receives
//! W - 1 descriptors per window and maps one region per rank. A run that does not fit
//! would start ranks until the OOM killer or a limit ended them (and other jobs'
//! processes), so it is refused here with the figures instead.

use crate::human_size;

/// What the machine (and this process's cgroup) gives a run.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// Host memory available: the smaller of `MemAvailable` and the cgroup's room.
    pub memory: Option<(u64, String)>,
    /// `RLIMIT_NOFILE` (soft), the open-file limit of the supervisor and of each rank.
    pub open_files: Option<u64>,
    /// Tasks (processes and threads) that may still start: the smaller of
    /// `RLIMIT_NPROC` (not enforced for root) and the cgroup's `pids.max - pids.current`.
    pub tasks: Option<(u64, String)>,
    /// `vm.max_map_count`: memory mappings per process.
    pub max_map_count: Option<u64>,
    /// Address space a process may reserve (`RLIMIT_AS`, else the 47-bit user space).
    pub address_space: u64,
}

/// What one run asks of it.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub world: usize,
    /// Bytes of each rank's window.
    pub window: u64,
    /// Windows of a rank alive at once.
    pub windows: u64,
    /// True when the run writes its windows' host memory (the demo on the host
    /// provider); the bench touches a few bytes of each.
    pub host_memory: bool,
    /// What the figures say the run is ("world 64 x 4 MiB").
    pub flags: &'static str,
}

/// Threads a rank runs (main, exchange listener, ...), with a margin.
const TASKS_PER_RANK: u64 = 4;
/// Descriptors a process holds besides those per rank (std streams, store, sockets).
const BASE_FDS: u64 = 64;
/// Memory of one rank's process besides its window (binary, heap, stacks).
const RANK_OVERHEAD: u64 = 16 << 20;
/// Mappings of one rank besides one per peer per window (binary, libraries, pads).
const BASE_MAPPINGS: u64 = 1024;

impl Needs {
    /// The demo's: each rank's window holds a send and a receive chunk per rank.
    pub fn demo(world: usize, size: usize, host_memory: bool) -> Needs {
        let w = world as u64;
        Needs {
            world,
            window: (2 * size as u64).saturating_mul(w),
            windows: 1,
            host_memory,
            flags: "--size or --world",
        }
    }

    /// `bench rendezvous`: `windows` of `size` per rank alive at once (1, or every
    /// repeat's with `--fresh`); only a few bytes of each are touched.
    pub fn bench(world: usize, size: usize, windows: usize) -> Needs {
        Needs {
            world,
            window: size as u64,
            windows: windows as u64,
            host_memory: false,
            flags: "--sizes or --world",
        }
    }

    /// Every shortfall against `machine`, one sentence each; empty when it fits.
    pub fn shortfalls(&self, machine: &Machine, what: &str) -> Vec<String> {
        let w = self.world as u64;
        let mut out = Vec::new();
        let size = |n: u64| human_size(usize::try_from(n).unwrap_or(usize::MAX));
        let touched = self.window.saturating_mul(w);
        let reserve = touched.saturating_mul(self.windows);
        if self.host_memory {
            let need = touched.saturating_add(w.saturating_mul(RANK_OVERHEAD));
            if let Some((have, source)) = &machine.memory {
                if need > *have {
                    out.push(format!(
                        "{what} needs {} of host memory ({} per rank's window, {} \
                         ranks, with their processes); {} available ({source}); {} \
                         lower it",
                        size(need),
                        size(self.window),
                        self.world,
                        size(*have),
                        self.flags
                    ));
                }
            }
        }
        if reserve > machine.address_space {
            out.push(format!(
                "{what} needs {} of address space in every rank (world x window size{}); \
                 a process may reserve {}; {} lower it",
                size(reserve),
                if self.windows > 1 {
                    " x windows alive at once"
                } else {
                    ""
                },
                size(machine.address_space),
                self.flags
            ));
        }
        if let Some(limit) = machine.open_files {
            let need = w.saturating_mul(2) + BASE_FDS;
            if need > limit {
                out.push(format!(
                    "{what} needs about {need} open files (two pipes per rank in the \
                     supervisor, one descriptor per peer in each rank); RLIMIT_NOFILE is \
                     {limit}; raise it (ulimit -n) or lower --world"
                ));
            }
        }
        if let Some((room, source)) = &machine.tasks {
            let need = w.saturating_mul(TASKS_PER_RANK + 2);
            if need > *room {
                out.push(format!(
                    "{what} needs about {need} processes and threads ({} ranks, their \
                     threads and two supervisor threads each); {room} may start \
                     ({source}); lower --world",
                    self.world
                ));
            }
        }
        if let Some(max) = machine.max_map_count {
            let need = w.saturating_mul(2) + BASE_MAPPINGS;
            if need > max {
                out.push(format!(
                    "{what} needs about {need} memory mappings in every rank (one per \
                     peer per window); vm.max_map_count is {max}; lower --world or raise \
                     it (sysctl -w vm.max_map_count={})",
                    need.saturating_mul(2)
                ));
            }
        }
        out
    }
}

impl Machine {
    /// This machine and this process's limits, as far as they can be read.
    pub fn here() -> Machine {
        Machine {
            memory: memory(),
            open_files: rlimit(libc::RLIMIT_NOFILE),
            tasks: tasks(),
            max_map_count: read_u64("/proc/sys/vm/max_map_count"),
            address_space: rlimit(libc::RLIMIT_AS).unwrap_or(u64::MAX).min(1 << 47),
        }
    }
}

/// Refuse the run when it does not fit: one error naming every shortfall, one line
/// each (several on one line read as a wall of text).
pub fn check(needs: &Needs, what: &str) -> Result<(), crate::failure::Failure> {
    let problems = needs.shortfalls(&Machine::here(), what);
    let message = match problems.as_slice() {
        [] => return Ok(()),
        [only] => format!("{only} (no rank was started)"),
        several => format!("{}\n(no rank was started)", several.join("\n")),
    };
    Err(crate::failure::Failure::setup(message))
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(resource, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The directories of this process's cgroup that hold `file`: cgroup v2 (`0::/path`,
/// under /sys/fs/cgroup) and the v1 `controller` hierarchy; the mount's root too,
/// since inside a cgroup namespace the listed path is relative to it.
fn cgroup_file(controller: &str, file_v2: &str, file_v1: &str) -> Option<String> {
    let listing = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in listing.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup/{path}/{file_v2}"));
            candidates.push(format!("/sys/fs/cgroup/{file_v2}"));
        } else if controllers.split(',').any(|c| c == controller) {
            candidates.push(format!("/sys/fs/cgroup/{controller}/{path}/{file_v1}"));
            candidates.push(format!("/sys/fs/cgroup/{controller}/{file_v1}"));
        }
    }
    candidates
        .into_iter()
        .map(|p| p.replace("//", "/"))
        .find(|p| std::path::Path::new(p).exists())
}

/// A cgroup limit and what is in use, `None` when there is no limit ("max", or v1's
/// near-`i64::MAX` value).
fn cgroup_room(controller: &str, limit: (&str, &str), usage: (&str, &str)) -> Option<(u64, u64)> {
    let limit_path = cgroup_file(controller, limit.0, limit.1)?;
    let max = read_u64(&limit_path).filter(|&m| m < (1 << 62))?;
    let used = cgroup_file(controller, usage.0, usage.1)
        .and_then(|p| read_u64(&p))
        .unwrap_or(0);
    Some((max, used))
}

fn memory() -> Option<(u64, String)> {
    let machine = mem_available().map(|m| (m, "MemAvailable".to_owned()));
    let cgroup = cgroup_room(
        "memory",
        ("memory.max", "memory.limit_in_bytes"),
        ("memory.current", "memory.usage_in_bytes"),
    )
    .map(|(max, used)| {
        let room = max.saturating_sub(used);
        let source = format!(
            "this cgroup's memory limit {}, {} in use",
            human_size(max as usize),
            human_size(used as usize)
        );
        (room, source)
    });
    [machine, cgroup]
        .into_iter()
        .flatten()
        .min_by_key(|(m, _)| *m)
}

fn tasks() -> Option<(u64, String)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let nproc = rlimit(libc::RLIMIT_NPROC).filter(|_| !root).map(|n| {
        (
            n,
            format!("RLIMIT_NPROC {n}, counting every task of this user"),
        )
    });
    let cgroup = cgroup_room(
        "pids",
        ("pids.max", "pids.max"),
        ("pids.current", "pids.current"),
    )
    .map(|(max, used)| {
        (
            max.saturating_sub(used),
            format!("this cgroup's pids.max {max}, {used} in use"),
        )
    });
    [nproc, cgroup]
        .into_iter()
        .flatten()
        .min_by_key(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(memory_gib: u64) -> Machine {
        Machine {
            memory: Some((memory_gib << 30, "MemAvailable".into())),
            open_files: Some(20_000),
            tasks: Some((100_000, "RLIMIT_NPROC 100000".into())),
            max_map_count: Some(65_530),
            address_space: 1 << 47,
        }
    }

    #[test]
    fn a_demo_that_does_not_fit_in_memory_is_refused_with_the_figures() {
        let needs = Needs::demo(64, 4 << 20, true);
        let problems = needs.shortfalls(&machine(23), "world 64 x 4 MiB");
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert!(
            p.starts_with("world 64 x 4 MiB needs 33 GiB of host memory"),
            "{p}"
        );
        assert!(
            p.contains("23 GiB available (MemAvailable); --size or --world lower it"),
            "{p}"
        );
        // On CUDA the windows are device memory: the host's does not limit them.
        assert!(Needs::demo(64, 4 << 20, false)
            .shortfalls(&machine(23), "x")
            .is_empty());
        assert!(Needs::demo(8, 4 << 20, true)
            .shortfalls(&machine(23), "x")
            .is_empty());
    }

    #[test]
    fn a_huge_world_names_every_limit_it_passes() {
        let problems = Needs::demo(1_000_000, 4 << 20, true).shortfalls(&machine(23), "w");
        let text = problems.join("\n");
        for expected in [
            "of host memory",
            "of address space",
            "RLIMIT_NOFILE is 20000",
            "RLIMIT_NPROC 100000",
            "vm.max_map_count is 65530",
        ] {
            assert!(text.contains(expected), "{expected}: {text}");
        }
    }

    #[test]
    fn limits_of_this_machine_are_read() {
        let here = Machine::here();
        assert!(
            here.memory.is_some(),
            "MemAvailable is always there on Linux"
        );
        assert!(here.address_space > 0);
    }

    #[test]
    fn a_bench_size_beyond_the_address_space_says_world_x_size() {
        let problems =
            Needs::bench(2, 100_000 << 30, 1).shortfalls(&machine(23), "world 2 x 97.7 TiB");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("of address space in every rank (world x window size)"),
            "{problems:?}"
        );
        // Memory the bench does not touch is not asked for.
        assert!(Needs::bench(2, 1000 << 30, 1)
            .shortfalls(&machine(23), "x")
            .is_empty());
    }
}
