//! Start one worker process per rank, supervise them, and collect what they report.
//!
//! Workers write one JSON object per line on stdout: `{"event":"progress",...}` while
//! they run and `{"event":"result",...}` at the end. Their stderr is kept for the
//! report, or passed through when `SYMMWIN_LOG` asks for logs.
//!
//! The supervisor is every rank's parent, so it knows how each one ended. It bounds
//! its own wait: once a rank has failed (a non-zero exit or a signal), the others are
//! killed within a quarter of a second; once one has exited 0, the others get the
//! peers' timeout plus a margin. On SIGINT or SIGTERM, also while it is still
//! starting ranks, it kills and reaps every rank started so far and removes its
//! store; a rank whose supervisor dies (even by SIGKILL) is killed by the kernel
//! (`PR_SET_PDEATHSIG`), and the store it leaves is removed by the next launch.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ending::{rank_list, Ending};
use crate::failure::Failure;
use crate::interrupt;
use crate::progress::Progress;

const STORE_PREFIX: &str = "symmwin-store-";

/// A private store directory for one launch, removed on drop.
pub struct StoreDir(pub PathBuf);

impl StoreDir {
    pub fn new() -> Result<Self, Failure> {
        // A memory-backed file system keeps store round trips in the microseconds;
        // the job's temp dir may sit on a slow overlay.
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        remove_orphaned_stores(&root);
        let dir = root.join(format!(
            "{STORE_PREFIX}{}-{:x}",
            std::process::id(),
            symmwin::adapter::testing::random_u64()
        ));
        symmwin::FileStore::new(&dir).map_err(Failure::setup)?;
        Ok(StoreDir(dir))
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Stores of launches whose supervisor was killed before it could clean up: ours
/// (same uid), real directories, named after a pid that no longer runs.
fn remove_orphaned_stores(root: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let uid = own_uid();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STORE_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() && meta.uid() == uid && !pid_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn own_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn pid_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// What one rank reported.
pub struct RankOutcome {
    pub rank: usize,
    pub pid: u32,
    pub ending: Ending,
    pub result: Option<Value>,
    /// Empty when stderr was passed through.
    pub stderr: String,
    /// When the supervisor saw it end, relative to the others: the first failure is
    /// the cause, the rest its consequences.
    seen: usize,
}

impl RankOutcome {
    /// Exit status 0 and a result: the rank did all it was asked.
    pub fn finished(&self) -> bool {
        self.ending == Ending::Exited0 && self.result.is_some()
    }
}

/// How to run the ranks.
pub struct Launch<'a> {
    pub world: usize,
    pub args: &'a dyn Fn(usize) -> Vec<String>,
    /// How long the other ranks may run once one has exited 0 (a failure reaches
    /// every peer within its timeout, so longer means a rank is stuck).
    pub grace: Duration,
    /// Let the ranks' stderr through (when `SYMMWIN_LOG` is set).
    pub pass_stderr: bool,
}

/// How long the other ranks may run once one has failed: long enough for a peer
/// that failed at the same moment to exit with its own report, short enough that
/// the run ends within a second of the failure.
const AFTER_FAILURE: Duration = Duration::from_millis(250);

struct Running {
    rank: usize,
    pid: u32,
    child: Child,
    stdout: JoinHandle<Option<Value>>,
    stderr: Option<JoinHandle<String>>,
    ending: Option<Ending>,
    seen: usize,
}

/// The ranks started so far, and the first of them to end (and to fail).
#[derive(Default)]
struct Ranks {
    running: Vec<Running>,
    ended: usize,
    first_exit: Option<(usize, Instant)>,
    first_failure: Option<(usize, Instant)>,
}

impl Ranks {
    /// Note every rank that has ended since the last call.
    fn poll(&mut self, progress: &mut Progress) {
        for r in self.running.iter_mut().filter(|r| r.ending.is_none()) {
            let Some(status) = r.child.try_wait().ok().flatten() else {
                continue;
            };
            let ending = Ending::of(status);
            let now = Instant::now();
            self.first_exit.get_or_insert((r.rank, now));
            if ending.is_failure() && self.first_failure.is_none() {
                self.first_failure = Some((r.rank, now));
                // The slowest rank's count would stay where the dead one left it.
                progress.stop();
            }
            progress.leave(r.rank);
            r.ending = Some(ending);
            r.seen = self.ended;
            self.ended += 1;
        }
        self.remove_killed_ranks_sockets();
    }

    /// A killed rank cannot remove its exchange sockets: once every rank is reaped,
    /// the supervisor does (the ranks' socket directory is the one it checked).
    fn remove_killed_ranks_sockets(&self) {
        if let Ok(config) = symmwin::Config::from_env() {
            let pids: Vec<u32> = self.running.iter().map(|r| r.pid).collect();
            symmwin::adapter::remove_sockets_of(&config.socket_dir, &pids);
        }
    }

    fn all_ended(&self) -> bool {
        self.ended == self.running.len()
    }

    /// Kill every rank still running (SIGKILL works on stopped ranks too), then reap
    /// them all: killed together, they die together.
    fn stop_all(&mut self, why: &str) {
        let mut killed = Vec::new();
        for r in self.running.iter_mut().filter(|r| r.ending.is_none()) {
            let state = if is_stopped(r.pid) {
                " (it was stopped: SIGSTOP or a debugger)"
            } else {
                ""
            };
            let _ = r.child.kill();
            killed.push((r, state));
        }
        for (r, state) in killed {
            let status = r.child.wait().ok();
            // A rank that exited on its own just before the kill keeps its own ending.
            r.ending = Some(match status.map(Ending::of) {
                Some(Ending::Signalled { signal, .. }) if signal == libc::SIGKILL => {
                    Ending::Stopped(format!("{why}{state}"))
                }
                Some(own) => own,
                None => Ending::Stopped(format!("{why}{state}")),
            });
            r.seen = self.ended;
            self.ended += 1;
        }
        self.remove_killed_ranks_sockets();
    }

    fn into_outcomes(self) -> Vec<RankOutcome> {
        self.running
            .into_iter()
            .map(|r| RankOutcome {
                rank: r.rank,
                pid: r.pid,
                ending: r
                    .ending
                    .unwrap_or_else(|| Ending::Stopped("never reaped".into())),
                result: r.stdout.join().unwrap_or(None),
                stderr: r.stderr.and_then(|t| t.join().ok()).unwrap_or_default(),
                seen: r.seen,
            })
            .collect()
    }
}

/// True when `pid` is in the stopped or traced state (from /proc).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let state = rest.trim_start().chars().next()?;
            Some(state == 'T' || state == 't')
        })
        .unwrap_or(false)
}

/// Run the ranks, showing their progress events (`{"done": rounds}`) on `progress`.
///
/// SIGINT and SIGTERM are honoured from the first spawn on: the ranks started so far
/// are killed and reaped. A rank that fails (a non-zero exit or a signal) ends the run
/// within `AFTER_FAILURE`; one that exits 0 gives the others `launch.grace`.
pub fn run_workers(
    launch: &Launch<'_>,
    progress: &mut Progress,
) -> Result<Vec<RankOutcome>, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::setup(format!("cannot find own executable: {e}")))?;
    interrupt::catch();
    let (tx, rx) = mpsc::channel::<(usize, Value)>();
    let mut ranks = Ranks::default();
    for rank in 0..launch.world {
        if let Some(signal) = interrupt::received() {
            ranks.stop_all("interrupted");
            return Err(Failure::interrupted(signal));
        }
        match spawn(&exe, rank, launch, tx.clone()) {
            Ok(running) => ranks.running.push(running),
            Err(e) => {
                ranks.stop_all("a later rank could not start");
                return Err(Failure::setup(format!("cannot start rank {rank}: {e}")));
            }
        }
        ranks.poll(progress);
        if let Some((failed, _)) = ranks.first_failure {
            let rest = launch.world - rank - 1;
            if rest > 0 {
                eprintln!(
                    "symmwin: rank {failed} failed while ranks were starting; {} not started",
                    crate::plural(rest, "more rank")
                );
            }
            break;
        }
    }
    drop(tx);
    supervise(&mut ranks, &rx, launch, progress)?;
    Ok(ranks.into_outcomes())
}

/// Show progress until every rank has ended, or the run is cut short.
fn supervise(
    ranks: &mut Ranks,
    rx: &mpsc::Receiver<(usize, Value)>,
    launch: &Launch<'_>,
    progress: &mut Progress,
) -> Result<(), Failure> {
    loop {
        // A bounded drain: ranks that report fast must not starve the checks below.
        let rounds = |event: &Value| event["done"].as_u64().unwrap_or(0);
        if let Ok((rank, event)) = rx.recv_timeout(Duration::from_millis(20)) {
            progress.record(rank, rounds(&event));
            for (rank, event) in rx.try_iter().take(1024) {
                progress.record(rank, rounds(&event));
            }
        }
        // Also while no rank reports: a stalled run shows that it is stalled.
        progress.show();
        if let Some(signal) = interrupt::received() {
            ranks.stop_all("interrupted");
            return Err(Failure::interrupted(signal));
        }
        ranks.poll(progress);
        if ranks.all_ended() {
            return Ok(());
        }
        if let Some((failed, at)) = ranks.first_failure {
            if at.elapsed() > AFTER_FAILURE {
                ranks.stop_all(&format!("rank {failed} had failed"));
                return Ok(());
            }
        } else if let Some((first, at)) = ranks.first_exit {
            if at.elapsed() > launch.grace {
                let why = format!(
                    "still running {:.1} s after rank {first} exited",
                    at.elapsed().as_secs_f64()
                );
                ranks.stop_all(&why);
                return Ok(());
            }
        }
    }
}

fn spawn(
    exe: &Path,
    rank: usize,
    launch: &Launch<'_>,
    tx: mpsc::Sender<(usize, Value)>,
) -> std::io::Result<Running> {
    let mut command = Command::new(exe);
    command
        .arg("worker")
        .args((launch.args)(rank))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if launch.pass_stderr {
            Stdio::inherit()
        } else {
            Stdio::piped()
        });
    die_with_parent(&mut command);
    let mut child = command.spawn()?;
    let pid = child.id();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    });
    let stdout = std::thread::spawn(move || read_events(rank, stdout, tx));
    Ok(Running {
        rank,
        pid,
        child,
        stdout,
        stderr,
        ending: None,
        seen: 0,
    })
}

/// The kernel kills the rank when the supervisor dies, however it dies.
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

fn read_events(
    rank: usize,
    stdout: std::process::ChildStdout,
    tx: mpsc::Sender<(usize, Value)>,
) -> Option<Value> {
    let mut result = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match v.get("event").and_then(Value::as_str) {
            Some("result") => result = Some(v),
            _ => {
                let _ = tx.send((rank, v));
            }
        }
    }
    result
}

/// Say how every rank that did not finish ended, the first failure first, each with
/// its stderr; true when every rank finished (exit 0 with a result).
pub fn report_endings(outcomes: &[RankOutcome], stderr_passed: bool) -> bool {
    let mut order: Vec<&RankOutcome> = outcomes.iter().filter(|o| !o.finished()).collect();
    order.sort_by_key(|o| o.seen);
    let mut stopped: Vec<(&str, Vec<(usize, u32)>)> = Vec::new();
    for o in &order {
        let who = format!("rank {} (pid {})", o.rank, o.pid);
        match &o.ending {
            Ending::Stopped(why) => {
                match stopped.iter_mut().find(|(w, _)| w == why) {
                    Some((_, list)) => list.push((o.rank, o.pid)),
                    None => stopped.push((why, vec![(o.rank, o.pid)])),
                }
                if o.stderr.is_empty() {
                    continue;
                }
                eprintln!("{who} wrote before it was stopped:");
            }
            // Not a failure: the rank did what it meant to, only not all of the run.
            Ending::Exited0 => eprintln!("{who} exited 0 before the run was done (no result)"),
            failed if stderr_passed => {
                eprintln!("{who} {} (its output is above)", failed.describe())
            }
            failed if o.stderr.is_empty() => eprintln!("{who} {}", failed.describe()),
            failed => eprintln!("{who} {}:", failed.describe()),
        }
        for line in o.stderr.lines() {
            eprintln!("  {line}");
        }
    }
    for (why, list) in &stopped {
        let verb = if list.len() == 1 { "was" } else { "were" };
        eprintln!("{} {verb} stopped by symmwin: {why}", rank_list(list));
    }
    order.is_empty()
}
