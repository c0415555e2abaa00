//! One watcher per process for the lives of local peers: a thread blocked in `poll` on
//! a pidfd per watched process, which marks a process that ends so that every wait for
//! it (host or device) can fail within a second, naming it, instead of waiting out its
//! timeout.
//!
//! Only peers proven to share this kernel and pid namespace are watched (the locality
//! check of a rendezvous; a pid from another namespace may name an unrelated process
//! here). Groups register the pids of their peers and drop the registration with the
//! group; a pid watched by many groups is one entry, so 1,000 groups cost no more than
//! one. Where the kernel has no `pidfd_open` (before Linux 5.3) the thread checks the
//! watched pids every 100 ms instead (and then a pid reused within that time goes
//! unnoticed). Exit status is knowable only to a parent: a watched child is reported
//! with its status or signal, any other process as "exited".
//!
//! A wait checks its own condition first and the mark only after it, so a peer that
//! did its part and then exited does not fail a wait it already satisfied; a peer that
//! is alive but slow gets the whole timeout.
//!
//! Device waits cannot call in here: a provider attaches [`ExitMarks`] to a peer set
//! (memory its kernels read while they wait) and the thread writes each rank's mark
//! there as the rank ends, whether or not a kernel is waiting (under graph replay that
//! cannot be known), so the marks are always current.

use crate::lock::Recover;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, WaitId, WaitIdOptions};

use crate::peer_exit::PeerExit;

/// How often the thread checks pids it has no pidfd for.
const FALLBACK_PERIOD: Duration = Duration::from_millis(100);

/// Where the watcher marks the ranks of a peer set that end: memory a device reads while
/// it waits (a provider's host-mapped array). Marking is idempotent: a rank may be
/// marked more than once.
pub trait ExitMarks: Send + Sync {
    /// Rank `rank` of the set, process `pid`, has ended.
    fn mark(&self, rank: usize, pid: u32);
}

struct Entry {
    /// `None` where the kernel has no pidfds: checked by `kill(pid, 0)` instead.
    pidfd: Option<Arc<OwnedFd>>,
    /// The process was running when the watch began.
    seen_alive: bool,
    watchers: usize,
    /// How it ended, and when among the ends this process saw ([`next_end`]).
    exit: Option<(u64, PeerExit)>,
}

/// The place of an end just seen among all ends this process saw: when several peers
/// a wait waits for have ended, the first to end is the likeliest cause (the others
/// may have left because of it).
fn next_end() -> u64 {
    static ENDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    ENDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

struct Watcher {
    entries: Mutex<HashMap<u32, Entry>>,
    /// Written to wake the thread when the set of watched pids changes.
    wake: OwnedFd,
}

static WATCHER: OnceLock<Option<Watcher>> = OnceLock::new();

/// The watcher, started on first use (its eventfd and thread cost nothing until then).
fn watcher() -> Option<&'static Watcher> {
    WATCHER
        .get_or_init(|| {
            let flags =
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
            let wake = rustix::event::eventfd(0, flags)
                .inspect_err(|e| tracing::warn!("symmwin: no peer watcher (eventfd: {e})"))
                .ok()?;
            std::thread::Builder::new()
                .name("symmwin-peer-watch".into())
                .spawn(run)
                .inspect_err(|e| tracing::warn!("symmwin: no peer watcher thread: {e}"))
                .ok()?;
            Some(Watcher {
                entries: Mutex::new(HashMap::new()),
                wake,
            })
        })
        .as_ref()
}

/// The watcher if it was ever started: looking a pid up never starts it.
fn started() -> Option<&'static Watcher> {
    WATCHER.get().and_then(Option::as_ref)
}

fn entries(w: &Watcher) -> MutexGuard<'_, HashMap<u32, Entry>> {
    w.entries.lock().recover()
}

fn wake(w: &Watcher) {
    let _ = rustix::io::write(&w.wake, &1u64.to_ne_bytes());
}

/// Pids watched for as long as this lives (a group's local peers).
#[derive(Debug, Default)]
pub struct Watched {
    pids: Vec<u32>,
}

/// Watch `pids` (this process's own pid is skipped: ranks that are threads of one
/// process share it).
pub fn watch(pids: impl IntoIterator<Item = u32>) -> Watched {
    let ours = std::process::id();
    let pids: Vec<u32> = pids.into_iter().filter(|&p| p != ours && p != 0).collect();
    if pids.is_empty() {
        return Watched::default();
    }
    let Some(w) = watcher() else {
        return Watched::default();
    };
    let mut map = entries(w);
    for &pid in &pids {
        map.entry(pid).or_insert_with(|| open(pid)).watchers += 1;
    }
    drop(map);
    wake(w);
    Watched { pids }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let Some(w) = started() else { return };
        let mut map = entries(w);
        for pid in &self.pids {
            if let Some(entry) = map.get_mut(pid) {
                entry.watchers -= 1;
                if entry.watchers == 0 {
                    map.remove(pid);
                }
            }
        }
        drop(map);
        wake(w);
    }
}

/// A group's peers as the waits name them: a handle (cheap to copy into every wait) to
/// the pid of each rank that is watched, registered by `register`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PeerSet(u64);

impl PeerSet {
    /// No peers watched: waits get their whole timeout.
    pub const NONE: PeerSet = PeerSet(0);

    /// How rank `rank` ended, if it is watched and has ended.
    pub fn exited(self, rank: usize) -> Option<PeerExit> {
        if self == PeerSet::NONE {
            return None;
        }
        let pid = tables().get(&self.0)?.pids.get(rank).copied()?;
        exit_of(pid)
    }

    /// Have `marks` told of every rank of this set that ends while the set is
    /// registered: those that have ended already at once, the others as they end.
    /// Returns false (and keeps nothing) when the set is not registered.
    pub fn attach_marks(self, marks: Arc<dyn ExitMarks>) -> bool {
        let pids = {
            let mut tables = tables();
            let Some(table) = tables.get_mut(&self.0) else {
                return false;
            };
            table.marks.push(Arc::clone(&marks));
            table.pids.clone()
        };
        // An end between the push above and this look is marked twice: harmless.
        for (rank, &pid) in pids.iter().enumerate() {
            if pid != 0 && exit_of(pid).is_some() {
                marks.mark(rank, pid);
            }
        }
        true
    }

    /// The error of a wait in `phase` for rank `rank`, if it has ended.
    pub fn exit_error(
        self,
        phase: crate::error::Phase,
        rank: usize,
    ) -> Option<crate::error::Error> {
        Some(exit_error(phase, rank, self.exited(rank)?))
    }
}

/// A group's registered peers: watched, and named by [`Registered::set`], while this
/// lives.
#[derive(Debug)]
pub struct Registered {
    set: PeerSet,
    _watched: Watched,
}

impl Registered {
    /// The handle waits take.
    pub fn set(&self) -> PeerSet {
        self.set
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        tables().remove(&self.set.0);
    }
}

/// A registered peer set: the pid of each rank (0: not watched) and the marks to write
/// when one ends.
struct Table {
    pids: Vec<u32>,
    marks: Vec<Arc<dyn ExitMarks>>,
}

/// Lock order: `tables()` may be taken first and `entries()` inside it, never the
/// reverse.
fn tables() -> MutexGuard<'static, HashMap<u64, Table>> {
    static TABLES: OnceLock<Mutex<HashMap<u64, Table>>> = OnceLock::new();
    TABLES.get_or_init(Mutex::default).lock().recover()
}

/// Watch the processes of a group's ranks: `pids[r]` is rank `r`'s, 0 where it is not
/// to be watched (our own rank, ranks on other hosts or in another pid namespace).
pub fn register(pids: Vec<u32>) -> Registered {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let key = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let watched = watch(pids.iter().copied());
    let table = Table {
        pids,
        marks: Vec::new(),
    };
    tables().insert(key, table);
    Registered {
        set: PeerSet(key),
        _watched: watched,
    }
}

/// Whether `pid` is watched and was running when its watch began (a process a
/// rendezvous saw during a call, not one gone before it).
pub fn seen_alive(pid: u32) -> bool {
    started().is_some_and(|w| entries(w).get(&pid).is_some_and(|e| e.seen_alive))
}

/// How `pid` ended, if it is watched and has ended.
pub fn exit_of(pid: u32) -> Option<PeerExit> {
    ended_at(pid).map(|(_, exit)| exit)
}

/// How `pid` ended and its place among the ends seen, if it is watched and has ended.
fn ended_at(pid: u32) -> Option<(u64, PeerExit)> {
    let w = started()?;
    entries(w).get(&pid).and_then(|e| e.exit.clone())
}

/// A new entry for `pid`: its pidfd, or already ended when it is gone.
fn open(pid: u32) -> Entry {
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let mut entry = Entry {
        pidfd: None,
        seen_alive: false,
        watchers: 0,
        exit: None,
    };
    match raw.map(|p| rustix::process::pidfd_open(p, PidfdFlags::empty())) {
        Some(Ok(fd)) => {
            entry.pidfd = Some(Arc::new(fd));
            entry.seen_alive = true;
        }
        Some(Err(rustix::io::Errno::SRCH)) | None => {
            entry.exit = Some((next_end(), ended(pid, None)));
        }
        // No pidfds here: the fallback check.
        Some(Err(_)) => entry.seen_alive = !gone(pid),
    }
    entry
}

/// How `pid` ended: its status when it is our child (read without reaping it).
fn ended(pid: u32, pidfd: Option<&OwnedFd>) -> PeerExit {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    let status = pidfd.and_then(|fd| {
        rustix::process::waitid(WaitId::PidFd(fd.as_fd()), options)
            .ok()
            .flatten()
    });
    let how = match status.map(|s| (s.exit_status(), s.terminating_signal())) {
        Some((Some(code), _)) => format!("exited with status {code}"),
        Some((_, Some(signal))) => format!("was killed by signal {signal}{}", signal_name(signal)),
        _ => return PeerExit::exited(pid),
    };
    PeerExit { pid, how }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        _ => return String::new(),
    };
    format!(" ({name})")
}

/// The watcher thread: wait for any watched process to end, or for the set to change.
fn run() {
    // Blocks until the initialisation that spawned this thread has finished.
    let Some(w) = watcher() else { return };
    loop {
        let (live, fallback): (Vec<(u32, Arc<OwnedFd>)>, Vec<u32>) = {
            let map = entries(w);
            let open = map.iter().filter(|(_, e)| e.exit.is_none());
            let live = open
                .clone()
                .filter_map(|(&pid, e)| e.pidfd.clone().map(|fd| (pid, fd)))
                .collect();
            let fallback = open
                .filter(|(_, e)| e.pidfd.is_none())
                .map(|(&p, _)| p)
                .collect();
            (live, fallback)
        };
        let mut fds: Vec<PollFd<'_>> = live
            .iter()
            .map(|(_, fd)| PollFd::new(fd.as_ref(), PollFlags::IN))
            .collect();
        fds.push(PollFd::new(&w.wake, PollFlags::IN));
        let period = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: FALLBACK_PERIOD.as_nanos() as i64,
        };
        let timeout = (!fallback.is_empty()).then_some(&period);
        if rustix::event::poll(&mut fds, timeout).is_err() {
            continue; // EINTR
        }
        let ended_now: Vec<(u32, PeerExit)> = live
            .iter()
            .zip(&fds)
            .filter(|(_, p)| !p.revents().is_empty())
            .map(|((pid, fd), _)| (*pid, ended(*pid, Some(fd))))
            .chain(
                fallback
                    .into_iter()
                    .filter(|&p| gone(p))
                    .map(|p| (p, ended(p, None))),
            )
            .collect();
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(&w.wake, &mut counter);
        let mut map = entries(w);
        for (pid, exit) in &ended_now {
            if let Some(entry) = map.get_mut(pid) {
                entry.exit.get_or_insert_with(|| (next_end(), exit.clone()));
            }
        }
        drop(map);
        mark_ended(ended_now.iter().map(|(pid, _)| *pid));
    }
}

/// Writes the marks of every registered rank whose process is one of `pids`.
fn mark_ended(pids: impl Iterator<Item = u32>) {
    let pids: Vec<u32> = pids.collect();
    if pids.is_empty() {
        return;
    }
    for table in tables().values() {
        for (rank, pid) in table.pids.iter().enumerate() {
            if pids.contains(pid) {
                table.marks.iter().for_each(|m| m.mark(rank, *pid));
            }
        }
    }
}

/// Whether `pid` is gone (the check where there is no pidfd).
fn gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return true;
    };
    matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// The one of `peers` (rank and pid) that ended first, as the error of a wait for it in
/// `phase`.
pub fn first_exited(
    phase: crate::error::Phase,
    peers: impl IntoIterator<Item = (usize, u32)>,
) -> Option<crate::error::Error> {
    peers
        .into_iter()
        .filter_map(|(rank, pid)| Some((rank, ended_at(pid)?)))
        .min_by_key(|(_, (place, _))| *place)
        .map(|(rank, (_, exit))| exit_error(phase, rank, exit))
}

/// The error of a wait in `phase` for rank `rank`, which ended as `exit` says.
fn exit_error(phase: crate::error::Phase, rank: usize, exit: PeerExit) -> crate::error::Error {
    let kind = crate::error::ErrorKind::PeerExited {
        rank,
        pid: exit.pid,
        how: exit.how,
    };
    crate::error::Error::new(phase, kind).with_peer(rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// A child that lives until it is killed (30 s at most).
    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_child_that_exits_is_marked_with_its_status_and_a_live_one_is_not() {
        let mut quick = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let mut slow = sleeper();
        let watched = watch([quick.id(), slow.id()]);
        assert!(until(Duration::from_secs(1), || exit_of(quick.id()).is_some()));
        let exit = exit_of(quick.id()).unwrap();
        assert_eq!(exit.how, "exited with status 3");
        assert_eq!(exit_of(slow.id()), None, "a live process is not marked");
        slow.kill().unwrap();
        assert!(until(Duration::from_secs(1), || exit_of(slow.id()).is_some()));
        assert_eq!(
            exit_of(slow.id()).unwrap().how,
            "was killed by signal 9 (SIGKILL)"
        );
        drop(watched);
        assert_eq!(exit_of(quick.id()), None, "no mark outlives its watchers");
        quick.wait().unwrap();
        slow.wait().unwrap();
    }

    #[test]
    fn of_several_ended_peers_a_wait_names_the_first_to_end_not_the_lowest_rank() {
        let mut second = sleeper();
        let mut first = sleeper();
        let watched = watch([second.id(), first.id()]);
        first.kill().unwrap();
        assert!(until(Duration::from_secs(1), || exit_of(first.id()).is_some()));
        second.kill().unwrap();
        assert!(until(Duration::from_secs(1), || exit_of(second.id()).is_some()));
        let peers = [(1, second.id()), (2, first.id())];
        let err = first_exited(crate::error::Phase::Exchange, peers).unwrap();
        assert_eq!(err.peer(), Some(2), "{err}");
        drop(watched);
        first.wait().unwrap();
        second.wait().unwrap();
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(usize, u32)>>);

    impl ExitMarks for Recorded {
        fn mark(&self, rank: usize, pid: u32) {
            self.0.lock().unwrap().push((rank, pid));
        }
    }

    impl Recorded {
        fn has(&self, rank: usize, pid: u32) -> bool {
            self.0.lock().unwrap().contains(&(rank, pid))
        }
    }

    #[test]
    fn marks_are_written_for_a_rank_that_ends_and_at_once_for_one_already_gone() {
        let mut alive = sleeper();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let group = register(vec![0, alive.id(), gone.id()]);
        let marks = Arc::new(Recorded::default());
        assert!(group.set().attach_marks(marks.clone()));
        assert!(until(Duration::from_secs(1), || marks.has(2, gone.id())));
        assert!(!marks.has(1, alive.id()), "a live rank is not marked");
        alive.kill().unwrap();
        assert!(until(Duration::from_secs(1), || marks.has(1, alive.id())));
        let set = group.set();
        drop(group);
        assert!(!set.attach_marks(Arc::new(Recorded::default())));
        alive.wait().unwrap();
    }

    #[test]
    fn our_own_pid_and_pid_zero_are_never_watched() {
        let watched = watch([std::process::id(), 0]);
        assert!(watched.pids.is_empty());
    }
}
