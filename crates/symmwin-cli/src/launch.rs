//! Start one worker process per rank and collect what they report.
//!
//! Workers write one JSON object per line on stdout: `{"event":"progress",...}` while
//! they run and `{"event":"result",...}` at the end. Stderr is kept for the report.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use serde_json::Value;

/// A private store directory for one launch, removed on drop.
pub struct StoreDir(pub PathBuf);

impl StoreDir {
    pub fn new() -> Result<Self, String> {
        // A memory-backed file system keeps store round trips in the microseconds;
        // the job's temp dir may sit on a slow overlay.
        let shm = std::path::Path::new("/dev/shm");
        let root = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = root.join(format!(
            "symmwin-store-{}-{:x}",
            std::process::id(),
            symmwin::token::random_u64()
        ));
        symmwin::FileStore::new(&dir).map_err(|e| e.to_string())?;
        Ok(StoreDir(dir))
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one rank reported.
pub struct RankOutcome {
    pub rank: usize,
    pub success: bool,
    pub result: Option<Value>,
    pub stderr: String,
}

/// Run `world` workers with `args(rank)`; `on_progress(rank, event)` sees progress events.
pub fn run_workers(
    world: usize,
    args: impl Fn(usize) -> Vec<String>,
    mut on_progress: impl FnMut(usize, &Value),
) -> Result<Vec<RankOutcome>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let (tx, rx) = mpsc::channel::<(usize, Value)>();
    let mut children: Vec<(Child, std::thread::JoinHandle<Option<Value>>)> = Vec::new();
    for rank in 0..world {
        let mut child = Command::new(&exe)
            .arg("worker")
            .args(args(rank))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start rank {rank}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let tx = tx.clone();
        let reader = std::thread::spawn(move || {
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
        });
        children.push((child, reader));
    }
    drop(tx);
    for (rank, event) in rx {
        on_progress(rank, &event);
    }
    let mut outcomes = Vec::new();
    for (rank, (mut child, reader)) in children.into_iter().enumerate() {
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let status = child.wait().map_err(|e| format!("rank {rank}: {e}"))?;
        let result = reader.join().unwrap_or(None);
        outcomes.push(RankOutcome {
            rank,
            success: status.success(),
            result,
            stderr,
        });
    }
    Ok(outcomes)
}

/// Print every failed rank's stderr; true when all succeeded.
pub fn report_failures(outcomes: &[RankOutcome]) -> bool {
    let mut ok = true;
    for o in outcomes.iter().filter(|o| !o.success) {
        ok = false;
        eprintln!("rank {} failed:", o.rank);
        for line in o.stderr.lines() {
            eprintln!("  {line}");
        }
    }
    ok
}
