//! Set-ups of containers on one machine: ranks in different pid namespaces that share
//! a kernel and a socket directory, and a store on a filesystem that fills up.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::quoted::assert_quoted;
use common::Job;
use symmwin::Allocation;

common::worker! {
    "pidns" => pid_namespace_rank,
}

/// One rendezvous of a two-rank group; reports which ranks the window maps and
/// what it read from each mapped slot.
fn pid_namespace_rank(rank: usize, world: usize) -> String {
    symmwin::adapter::init_logging(Some("warn")).unwrap();
    let (group, provider) = common::join_group("pidns", rank, world);
    // Each rank is another host to the other: a group spanning hosts needs a
    // process-group backend, though this test sends nothing through it.
    group.set_remote_peers(std::sync::Arc::new(common::hosts::NoMessages));
    let alloc = Allocation::new(provider, 4096).unwrap();
    // SAFETY: the allocation maps `size()` writable bytes at `ptr()` in this process.
    unsafe { std::ptr::write_bytes(alloc.ptr() as *mut u8, rank as u8 + 1, alloc.size()) };
    let window = match group.rendezvous(&alloc) {
        Ok(window) => window,
        Err(e) => return format!("error={:?}", e.to_string()),
    };
    let mut own = [0u8; 1];
    window.read(rank, 0, &mut own).unwrap();
    let mapped: Vec<String> = window
        .mapped_ranks()
        .iter()
        .map(|r| r.to_string())
        .collect();
    format!("mapped={} own={}", mapped.join(","), own[0])
}

/// True when this process may make a pid namespace (`unshare --pid --fork`).
fn can_unshare_pid() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Start `cmd` with its output in files `{tag}.out` and `{tag}.err` under `dir`.
fn start(mut cmd: Command, dir: &Path, tag: &str) -> std::process::Child {
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{tag}.err"))).unwrap());
    cmd.spawn().unwrap()
}

/// Wait for every child, killing all of them (and failing) past `limit`.
fn wait_all(mut children: Vec<std::process::Child>, dir: &Path, limit: Duration) -> Vec<Output> {
    let deadline = Instant::now() + limit;
    let mut status = vec![None; children.len()];
    while status.iter().any(Option::is_none) {
        for (i, child) in children.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = child.try_wait().unwrap();
            }
        }
        if Instant::now() > deadline {
            for child in &mut children {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("ranks still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    status
        .into_iter()
        .enumerate()
        .map(|(i, s)| Output {
            status: s.unwrap(),
            stdout: std::fs::read(dir.join(format!("{i}.out"))).unwrap_or_default(),
            stderr: std::fs::read(dir.join(format!("{i}.err"))).unwrap_or_default(),
        })
        .collect()
}

#[test]
fn ranks_in_other_pid_namespaces_are_other_hosts() {
    assert!(
        can_unshare_pid(),
        "this test needs `unshare --pid --fork` (util-linux, and root or user namespaces)"
    );
    let job = Job::new("pidns");
    let exe = std::env::current_exe().unwrap();
    let world = 2;
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let inner = job.command(&exe, "pidns", rank, world);
            // Rank 1 runs as in a container of its own pid namespace: the same kernel,
            // socket directory and store, another pid namespace.
            let mut cmd = if rank == 1 {
                let mut outer = Command::new("unshare");
                outer
                    .args(["--pid", "--fork", "--kill-child"])
                    .arg(inner.get_program())
                    .args(inner.get_args());
                outer
            } else {
                let mut plain = Command::new(inner.get_program());
                plain.args(inner.get_args());
                plain
            };
            for (key, value) in inner.get_envs() {
                if let Some(value) = value {
                    cmd.env(key, value);
                }
            }
            cmd.env("SYMMWIN_TIMEOUT_MS", "4000");
            start(cmd, &job.dir, &rank.to_string())
        })
        .collect();
    let outs = wait_all(children, &job.dir, Duration::from_secs(60));
    common::assert_all_success(&outs);
    for (rank, out) in outs.iter().enumerate() {
        let result = common::result(out);
        assert_eq!(
            result,
            format!("mapped={rank} own={}", rank + 1),
            "rank {rank}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("another pid namespace").count(),
            1,
            "rank {rank} warns once:\n{stderr}"
        );
        let warning = stderr
            .lines()
            .find(|l| l.contains("another pid namespace"))
            .unwrap();
        assert_quoted(warning);
    }
}
