//! Start one worker process per rank, supervise them, and collect what they report.
//!
//! Workers write one JSON object per line on stdout: `{"event":"progress",...}` while
//! they run and `{"event":"result",...}` at the end. Their stderr is kept for the
//! report, or passed through when `SYMMWIN_LOG` asks for logs.
//!
//! The supervisor bounds its own wait: once one rank has exited, the others get the
//! peers' timeout plus a margin, then are killed. On SIGINT or SIGTERM it kills and
//! reaps every rank and removes its store; a rank whose supervisor dies (even by
//! SIGKILL) is killed by the kernel (`PR_SET_PDEATHSIG`), and the store it leaves is
//! removed by the next launch.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

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
            symmwin::testing::random_u64()
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
    pub success: bool,
    pub result: Option<Value>,
    /// Empty when stderr was passed through.
    pub stderr: String,
    /// Why the supervisor ended the rank, if it did.
    pub killed: Option<String>,
}

/// How to run the ranks.
pub struct Launch<'a> {
    pub world: usize,
    pub args: &'a dyn Fn(usize) -> Vec<String>,
    /// How long the other ranks may run once one has exited.
    pub grace: Duration,
    /// Let the ranks' stderr through (when `SYMMWIN_LOG` is set).
    pub pass_stderr: bool,
}

struct Running {
    child: Child,
    stdout: JoinHandle<Option<Value>>,
    stderr: Option<JoinHandle<String>>,
    status: Option<ExitStatus>,
    killed: Option<String>,
}

/// Run the ranks, showing their progress events (`{"done": rounds}`) on `progress`.
pub fn run_workers(
    launch: &Launch<'_>,
    progress: &mut Progress,
) -> Result<Vec<RankOutcome>, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::setup(format!("cannot find own executable: {e}")))?;
    interrupt::catch();
    let (tx, rx) = mpsc::channel::<(usize, Value)>();
    let mut ranks: Vec<Running> = Vec::new();
    for rank in 0..launch.world {
        match spawn(&exe, rank, launch, tx.clone()) {
            Ok(running) => ranks.push(running),
            Err(e) => {
                stop_all(&mut ranks, "a later rank could not start");
                return Err(Failure::setup(format!("cannot start rank {rank}: {e}")));
            }
        }
    }
    drop(tx);
    let mut first_exit: Option<(usize, Instant)> = None;
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
            stop_all(&mut ranks, "interrupted");
            return Err(Failure::interrupted(signal));
        }
        for (rank, r) in ranks.iter_mut().enumerate() {
            if r.status.is_none() {
                r.status = r.child.try_wait().ok().flatten();
                if r.status.is_some() && first_exit.is_none() {
                    first_exit = Some((rank, Instant::now()));
                }
            }
        }
        if ranks.iter().all(|r| r.status.is_some()) {
            break;
        }
        if let Some((first, at)) = first_exit {
            if at.elapsed() > launch.grace {
                let why = format!(
                    "still running {:.1} s after rank {first} exited",
                    at.elapsed().as_secs_f64()
                );
                stop_all(&mut ranks, &why);
                break;
            }
        }
    }
    Ok(ranks
        .into_iter()
        .enumerate()
        .map(|(rank, r)| RankOutcome {
            rank,
            success: r.killed.is_none() && r.status.is_some_and(|s| s.success()),
            result: r.stdout.join().unwrap_or(None),
            stderr: r.stderr.and_then(|t| t.join().ok()).unwrap_or_default(),
            killed: r.killed,
        })
        .collect())
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
        child,
        stdout,
        stderr,
        status: None,
        killed: None,
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

/// Kill (SIGKILL works on stopped ranks too) and reap every rank still running.
fn stop_all(ranks: &mut [Running], why: &str) {
    for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
        let _ = r.child.kill();
        r.status = r.child.wait().ok();
        r.killed = Some(why.to_owned());
    }
}

/// Print every failed rank's report; true when all succeeded.
pub fn report_failures(outcomes: &[RankOutcome], stderr_passed: bool) -> bool {
    let mut ok = true;
    for o in outcomes.iter().filter(|o| !o.success) {
        ok = false;
        match &o.killed {
            Some(why) => eprintln!("rank {} killed: {why}", o.rank),
            None if stderr_passed => eprintln!("rank {} failed (its output is above)", o.rank),
            None => eprintln!("rank {} failed:", o.rank),
        }
        for line in o.stderr.lines() {
            eprintln!("  {line}");
        }
    }
    ok
}
