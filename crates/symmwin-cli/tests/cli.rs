//! The `symmwin` command as a user runs it: exit codes, messages, tables, JSON, and
//! the supervisor's promise that no rank and no store outlives a run.

mod processes;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use symmwin::adapter::testing::assert_mentions;

fn symmwin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_symmwin"));
    cmd.env_remove("SYMMWIN_LOG")
        .env_remove("SYMMWIN_TIMEOUT_MS")
        .stdin(Stdio::null());
    cmd
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = symmwin();
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn counts_and_sizes_below_one_are_refused_naming_the_flag() {
    for (args, flag) in [
        (&["bench", "rendezvous", "--world", "0"][..], "--world"),
        (&["bench", "rendezvous", "--iters", "0"][..], "--iters"),
        (&["bench", "rendezvous", "--sizes", "1M,0"][..], "--sizes"),
        (&["demo", "--world", "0"][..], "--world"),
        (&["demo", "--iters", "0"][..], "--iters"),
        (&["demo", "--size", "0"][..], "--size"),
    ] {
        let out = run(args, &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(text(&out.stdout).is_empty(), "{args:?} printed a table");
    }
}

#[test]
fn the_demo_runs_with_a_fractional_size_and_says_what_auto_chose() {
    let out = run(
        &["demo", "--world", "2", "--size", "1.5M", "--iters", "1"],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let first = stdout.lines().next().unwrap_or_default();
    // No GPU on a CI machine: auto resolves to host; a GPU machine says cuda.
    assert!(
        first == "symmwin demo: world 2, 1.5 MiB per peer, 1 round, provider auto → host"
            || first.ends_with("provider auto → cuda"),
        "{first}"
    );
    let rows: Vec<&str> = stdout
        .lines()
        .skip(2)
        .take_while(|l| !l.starts_with('('))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(
        stdout.contains("with every page faulted in before the first round"),
        "says what its GB/s measure: {stdout}"
    );
    for row in &rows {
        assert!(row.ends_with("yes"), "{row}");
    }
    // Aligned: every row as wide as the header.
    let header = stdout.lines().nth(1).unwrap();
    assert!(rows.iter().all(|r| r.len() == header.len()), "{stdout}");
}

#[test]
fn a_provider_that_cannot_work_fails_setup_once_before_any_rank() {
    // No visible device: the CUDA provider cannot work here, with a driver or without.
    let out = run(
        &["demo", "--provider", "cuda"],
        &[("CUDA_VISIBLE_DEVICES", "")],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.matches("setup failed").count(), 1, "{err}");
    assert_mentions(&err, &["--provider host"]);
    assert!(!err.contains("verification"), "{err}");
    assert!(text(&out.stdout).is_empty(), "no table without ranks");
}

#[test]
fn a_bad_setting_is_reported_once_with_one_prefix() {
    let out = run(&["demo"], &[("SYMMWIN_TIMEOUT_MS", "soon")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(
        err.trim(),
        r#"symmwin setup failed [argument]: invalid argument: SYMMWIN_TIMEOUT_MS="soon" is not a number; allowed: a whole number of milliseconds above 0"#
    );
    let out = run(&["probe"], &[("SYMMWIN_LOG", "symmwin=loud")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_mentions(&err, &[r#"SYMMWIN_LOG="symmwin=loud" is not a log filter"#]);
    assert_eq!(err.matches("symmwin setup failed").count(), 1, "{err}");
    assert!(!err.contains("symmwin ["), "one prefix: {err}");
}

#[test]
fn symmwin_log_lets_the_ranks_logs_through() {
    let args = ["demo", "--world", "2", "--size", "4K", "--iters", "1"];
    let logged = run(&args, &[("SYMMWIN_LOG", "debug")]);
    assert!(logged.status.success());
    let err = text(&logged.stderr);
    assert_eq!(err.matches("waits for peers up to").count(), 2, "{err}");
    let quiet = run(&args, &[]);
    assert!(quiet.status.success());
    assert!(!text(&quiet.stderr).contains("waits for peers"));
}

fn version_of(doc: &serde_json::Value) -> &str {
    doc["version"].as_str().unwrap_or_default()
}

#[test]
fn json_output_carries_version_world_size_and_rounded_numbers() {
    let out = run(
        &[
            "demo", "--world", "2", "--size", "64K", "--iters", "2", "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let demo: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        version_of(&demo).starts_with(env!("CARGO_PKG_VERSION")),
        "{demo}"
    );
    assert_eq!(
        (demo["world"].as_u64(), demo["size"].as_u64()),
        (Some(2), Some(65536))
    );
    assert_eq!(demo["ranks"].as_array().map(Vec::len), Some(2));
    let args = [
        "bench",
        "rendezvous",
        "--world",
        "2",
        "--sizes",
        "64K",
        "--iters",
        "2",
        "--json",
    ];
    let out = run(&args, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bench: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        version_of(&bench).starts_with(env!("CARGO_PKG_VERSION")),
        "{bench}"
    );
    let row = &bench["rows"][0];
    assert_eq!(
        (row["world"].as_u64(), row["size"].as_u64()),
        (Some(2), Some(65536))
    );
    assert_eq!(row["samples"].as_array().map(Vec::len), Some(4)); // 2 ranks x 2 repeats
                                                                  // Per rank per rendezvous after the group's first: no store call (the requests
                                                                  // travel over the sockets), one message to the one peer.
    assert_eq!(
        (row["store_ops"].as_f64(), row["messages"].as_f64()),
        (Some(0.0), Some(1.0)),
        "{row}"
    );
    for number in [&row["total"], &row["phases"]["gather"]] {
        let x = number.as_f64().unwrap();
        assert_eq!(x, (x * 1e3).round() / 1e3, "{number} is not rounded");
    }
}

fn alive(pid: u32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !state.is_empty()
        && !state
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
}

fn stores_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("symmwin-store-{pid}-");
    ["/dev/shm".into(), std::env::temp_dir()]
        .iter()
        .filter_map(|root: &PathBuf| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory preconditions; pid is a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

/// A long demo, once all its ranks are running; returns it and their pids.
#[allow(clippy::zombie_processes)] // returned to the caller, which waits for it
/// The socket directory of this test process's long demos (created by the ranks).
fn socket_dir() -> PathBuf {
    std::env::temp_dir().join(format!("symmwin-cli-test-{}", std::process::id()))
}

/// The exchange sockets in [`socket_dir`] of the processes `pids`.
fn sockets_of(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir(socket_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            name.ends_with(".sock") && pids.iter().any(|pid| name.starts_with(&format!("{pid}-")))
        })
        .collect()
}

fn long_demo(world: usize) -> (Child, Vec<u32>) {
    #[allow(clippy::zombie_processes)] // returned: the caller waits for it
    let mut demo = symmwin()
        .args([
            "demo",
            "--world",
            &world.to_string(),
            "--size",
            "4K",
            "--iters",
            "100000000",
        ])
        .env("SYMMWIN_TIMEOUT_MS", "1000")
        .env("SYMMWIN_SOCKET_DIR", socket_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ranks = processes::children(demo.id());
        if ranks.len() == world && !stores_of(demo.id()).is_empty() {
            std::thread::sleep(Duration::from_millis(300)); // past the first rendezvous
            return (demo, ranks);
        }
        if Instant::now() > deadline {
            let _ = demo.kill();
            let _ = demo.wait();
            panic!("demo never started its ranks");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_gone(ranks: &[u32], within: Duration) {
    let deadline = Instant::now() + within;
    while ranks.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "rank(s) outlived the demo: {ranks:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    err
}

#[test]
fn a_stopped_rank_is_killed_once_a_peer_has_failed() {
    let (mut demo, ranks) = long_demo(3);
    signal(ranks[1], libc::SIGSTOP);
    // Peers time out after 1 s; the supervisor then stops rank 1 within 0.25 s.
    let status = wait_with_limit(&mut demo, Duration::from_secs(5));
    assert_eq!(status.code(), Some(1));
    assert_gone(&ranks, Duration::from_secs(2));
    assert!(stores_of(demo.id()).is_empty());
    let err = stderr_of(&mut demo);
    assert_mentions(
        &err,
        &[&format!(
            "rank 1 (pid {}) was stopped by symmwin: rank ",
            ranks[1]
        )],
    );
    // The last part is the peers' own reports.
    assert_mentions(&err, &["(it was stopped: SIGSTOP", "timed out after 1.0 s"]);
}

#[test]
fn a_sigkilled_rank_is_named_and_the_others_are_stopped_at_once() {
    let (mut demo, ranks) = long_demo(3);
    signal(ranks[1], libc::SIGKILL);
    let killed = Instant::now();
    let status = wait_with_limit(&mut demo, Duration::from_secs(10));
    let took = killed.elapsed();
    assert_eq!(status.code(), Some(1));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // Reaped by the demo before it exited: not even a zombie is left.
    let left: Vec<u32> = ranks.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "ranks outlived the demo: {left:?}");
    assert!(stores_of(demo.id()).is_empty());
    let err = stderr_of(&mut demo);
    let named = format!("rank 1 (pid {}) was killed by signal 9 (SIGKILL)", ranks[1]);
    assert!(err.starts_with(&named), "the cause comes first: {err}");
    assert!(!err.contains("rank 1 failed:"), "{err}");
}

#[test]
fn a_rank_that_exits_0_early_is_not_a_failure() {
    let out = run(
        &["demo", "--world", "3", "--size", "4K", "--iters", "3"],
        &[
            ("SYMMWIN_TIMEOUT_MS", "1000"),
            ("SYMMWIN_CLI_TEST_LEAVE_EARLY", "1"),
        ],
    );
    let err = text(&out.stderr);
    // The peers it left waiting fail; it does not.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let rank1: Vec<&str> = err.lines().filter(|l| l.starts_with("rank 1 ")).collect();
    assert_eq!(rank1.len(), 1, "{err}");
    assert!(
        rank1[0].ends_with("exited 0 before the run was done (no result)"),
        "{err}"
    );
    assert!(!err.contains("rank 1 had failed"), "{err}");
    for rank in [0, 2] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("rank {rank} (pid "))
                    && l.ends_with(") exited with status 1:")),
            "rank {rank} reports its own failure: {err}"
        );
    }
}

#[test]
fn sigterm_and_sigint_stop_the_ranks_and_remove_the_store() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let (mut demo, ranks) = long_demo(2);
        signal(demo.id(), sig);
        // Promptly, even while the ranks flood it with progress events.
        let status = wait_with_limit(&mut demo, Duration::from_secs(3));
        assert_eq!(status.code(), Some(code));
        assert_gone(&ranks, Duration::from_secs(2));
        assert!(
            stores_of(demo.id()).is_empty(),
            "store left after signal {sig}"
        );
        let left = sockets_of(&ranks);
        assert!(left.is_empty(), "sockets left after signal {sig}: {left:?}");
    }
}

#[test]
fn sigkill_of_the_demo_takes_its_ranks_and_the_next_run_removes_its_store() {
    let (mut demo, ranks) = long_demo(2);
    signal(demo.id(), libc::SIGKILL);
    demo.wait().unwrap();
    assert_gone(&ranks, Duration::from_secs(5));
    let left = stores_of(demo.id());
    assert_eq!(left.len(), 1, "a killed demo cannot clean up itself");
    let next = run(
        &["demo", "--world", "1", "--size", "4K", "--iters", "1"],
        &[],
    );
    assert!(next.status.success(), "{}", text(&next.stderr));
    assert!(
        !left[0].exists(),
        "the next run did not remove {}",
        left[0].display()
    );
}

/// Few file descriptors: the supervisor would run out of pipes a few ranks in, so
/// the run is refused before the first (a rank that cannot start still takes the
/// started ones down, but the limits a run needs are checked first).
#[test]
fn a_run_beyond_the_open_file_limit_is_refused_before_any_rank() {
    let mut demo = Command::new("bash")
        .args([
            "-c",
            "ulimit -n 16 && exec \"$0\" demo --world 8 --size 4K --iters 1",
        ])
        .arg(env!("CARGO_BIN_EXE_symmwin"))
        .env_remove("SYMMWIN_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_with_limit(&mut demo, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    assert_mentions(
        &err,
        &[
            "RLIMIT_NOFILE is 16; raise it (ulimit -n)",
            "(no rank was started)",
        ],
    );
    assert!(processes::children(demo.id()).is_empty());
    assert!(stores_of(demo.id()).is_empty());
}

#[test]
fn without_a_terminal_progress_is_a_line_every_few_seconds() {
    let (mut demo, _) = long_demo(2);
    std::thread::sleep(Duration::from_millis(5600));
    signal(demo.id(), libc::SIGTERM);
    wait_with_limit(&mut demo, Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("all-to-all rounds "))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].ends_with("/100000000 (5 s)"), "{}", lines[0]);
}

/// `symmwin bench rendezvous --provider host` with `args` after it.
fn host_bench(args: &[&str]) -> Output {
    let mut all = vec!["bench", "rendezvous", "--provider", "host"];
    all.extend_from_slice(args);
    run(&all, &[])
}

#[test]
fn a_bench_size_beyond_the_address_space_says_world_x_size_before_any_rank() {
    let out = host_bench(&["--sizes", "100000G"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_mentions(
        &err,
        &[
            "world 2 x 97.7 TiB needs 195.3 TiB of address space in every rank (world x window size)",
            "(no rank was started)",
        ],
    );
}

#[test]
fn bench_fresh_prints_a_dash_for_free_and_says_what_is_touched() {
    let out = host_bench(&["--sizes", "4K", "--iters", "2", "--fresh"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!stdout.contains("NaN"), "{stdout}");
    assert_mentions(
        &stdout,
        &["free: not measured (-)", "only 3 of its bytes are touched"],
    );
}

#[test]
fn symmwin_log_into_a_file_has_no_colours() {
    let args = [
        "demo",
        "--world",
        "2",
        "--size",
        "4K",
        "--iters",
        "1",
        "--provider",
        "host",
    ];
    let out = run(&args, &[("SYMMWIN_LOG", "debug")]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("DEBUG"), "logs came through: {err}");
    assert!(!err.contains('\u{1b}'), "ANSI escapes in a pipe: {err:?}");
}
