//! What a new user trips over first: stale stores, two processes given one rank,
//! subgroup errors that must say which ranks they mean, and readable durations.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use symmwin::adapter::testing::Namespace;
use symmwin::{
    Allocation, Config, FileStore, GroupSpec, HostProvider, MemoryStore, Provider, Store,
};

common::worker! {
    "rendezvous" => rendezvous,
}

/// One rendezvous of a fresh group, as a newcomer's first program does.
fn rendezvous(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    let alloc = Allocation::new(provider, 4096).unwrap();
    match group.rendezvous(&alloc) {
        Ok(_) => "ok".into(),
        Err(e) => format!("error {e}"),
    }
}

/// `message` with its numbers and store path made generic, as quoted on the page.
fn shape(message: &str, store: &std::path::Path) -> String {
    let generic = message
        .replace(&store.display().to_string(), "DIR")
        .replace("/dev/shm/my-job", "DIR");
    let mut out = String::new();
    for c in generic.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('N') {
                out.push('N');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// docs/troubleshooting.md quotes a message of this shape.
fn assert_quoted(message: &str, store: &std::path::Path) {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/troubleshooting.md"
    ))
    .unwrap();
    assert!(!message.is_empty());
    let want = shape(message, store);
    assert!(
        page.lines().any(|l| shape(l, store) == want),
        "docs/troubleshooting.md does not quote:\n{message}"
    );
}

fn config(tag: &str, timeout_ms: u64) -> common::TestConfig {
    common::TestConfig::new(&format!("nc-{tag}"), |c| {
        c.timeout = Duration::from_millis(timeout_ms)
    })
}

#[test]
fn a_request_left_by_a_dead_run_names_its_pid_and_the_store() {
    let job = common::Job::new("stale");
    // An earlier run: rank 1 publishes its request, then dies before rank 0 comes.
    let exe = std::env::current_exe().unwrap();
    let mut earlier = job
        .command(&exe, "rendezvous", 1, 2)
        .env("SYMMWIN_TIMEOUT_MS", "60000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let store = Arc::new(FileStore::new(job.store()).unwrap());
    let key = Namespace::new("test").request(0, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.try_get(&key).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "rank 1 never published"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = earlier.id();
    earlier.kill().unwrap();
    earlier.wait().unwrap();

    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let config = Config {
        timeout: Duration::from_millis(2000),
        socket_dir: job.sockets(),
        ..Config::default()
    };
    let group = common::group(GroupSpec::new("test", 0, 2), store, &provider, &config);
    let alloc = Allocation::new(provider, 4096).unwrap();
    let err = group.rendezvous(&alloc).unwrap_err().to_string();
    let expected = format!(
        "stale request from pid {pid} in store {}: use a fresh store",
        job.store().display()
    );
    assert!(err.contains(&expected), "{err}");
    assert_quoted(&err, &job.store());
}

#[test]
fn two_processes_claiming_one_rank_name_both_pids() {
    let job = common::Job::new("dup");
    // Both processes are told they are rank 0 of 2 (RANK unset, a launcher bug).
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..2)
        .map(|i| {
            let out = job.dir.join(format!("dup-{i}.out"));
            let mut cmd = job.command(&exe, "rendezvous", 0, 2);
            cmd.env("SYMMWIN_TIMEOUT_MS", "1500")
                .stdout(std::fs::File::create(&out).unwrap());
            let child = cmd.spawn().unwrap();
            // The second starts once the first has published.
            std::thread::sleep(Duration::from_millis(300));
            (child, out)
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|(c, _)| c.id()).collect();
    for (child, out) in &mut children {
        let status = child.wait().unwrap();
        let text = std::fs::read_to_string(out).unwrap();
        assert!(status.success(), "{text}");
        assert!(
            text.contains(&format!("pids {} and {}", pids[0], pids[1]))
                || text.contains(&format!("pids {} and {}", pids[1], pids[0])),
            "not both pids {pids:?} in: {text}"
        );
        assert!(text.contains("both claim rank 0"), "{text}");
        let message = text
            .lines()
            .find_map(|l| Some(l.split_once("RESULT error ")?.1))
            .unwrap_or_default()
            .replace("\"test\"", "\"my-job\"");
        // The later process fails at once; the earlier one when its wait ends.
        if message.contains("[publish]") {
            assert_quoted(&message, &job.store());
        } else {
            assert!(
                message.starts_with("symmwin rank 0 [gather]: invalid argument: pids"),
                "{message}"
            );
        }
    }
}

/// The error of a rendezvous that rank `spec.rank` starts alone: its peers never come.
fn rendezvous_alone(spec: GroupSpec, config: &Config) -> String {
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let group = common::group(spec, Arc::new(MemoryStore::new()), &provider, config);
    let alloc = Allocation::new(provider, 4096).unwrap();
    group.rendezvous(&alloc).unwrap_err().to_string()
}

#[test]
fn a_subgroup_timeout_names_the_group_and_global_ranks() {
    let spec = GroupSpec {
        name: "pairs".into(),
        rank: 0,
        world: 2,
        global_ranks: vec![1, 2],
    };
    let err = rendezvous_alone(spec, &config("sub", 200));
    let head = "symmwin group \"pairs\" rank 0 (global rank 1) [gather]: timed out after ";
    assert!(err.starts_with(head), "{err}");
    // The limit counts from the call's start, the figure from the gather's own start
    // (after publishing), so on a loaded machine it can read a little under 0.2 s.
    let waited: f64 = err[head.len()..]
        .split(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1.0);
    assert!((0.15..0.5).contains(&waited), "{err}");
    assert!(
        err.ends_with(" s waiting for group rank(s) [1] (global rank(s) [2])"),
        "{err}"
    );
}

#[test]
fn a_world_group_timeout_stays_short_and_rounds_its_duration() {
    let err = rendezvous_alone(GroupSpec::new("w", 0, 2), &config("world", 1000));
    assert_eq!(
        err,
        "symmwin rank 0 [gather]: timed out after 1.0 s waiting for rank(s) [1]"
    );
}

/// The README's configuration table lists exactly the variables the core checks, in
/// the same order: a variable added to one and not the other fails here.
#[test]
fn the_readme_lists_every_setting() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = readme
        .split("## Configuration")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Configuration section");
    let listed: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let known: Vec<&str> = symmwin::adapter::SETTINGS.iter().map(|s| s.name).collect();
    assert_eq!(
        listed, known,
        "README configuration table vs config::SETTINGS"
    );
    for setting in symmwin::adapter::SETTINGS {
        let row = section
            .lines()
            .find(|l| l.starts_with(&format!("| `{}`", setting.name)))
            .unwrap();
        assert_eq!(row.matches(" | ").count(), 3, "four columns: {row}");
    }
}

/// A test process leaves nothing in the temp dir or /dev/shm: the other tests of this
/// binary run in a child process, and whatever carries its pid afterwards is a leftover.
#[test]
fn the_tests_leave_no_directories_behind() {
    if std::env::var_os("SYMMWIN_LEFTOVER_CHILD").is_some() {
        return; // the child runs every other test, not this one again
    }
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--test-threads=2",
            "--skip",
            "the_tests_leave_no_directories_behind",
        ])
        .env("SYMMWIN_LEFTOVER_CHILD", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = common::leftovers_of(pid);
    for path in &left {
        let _ = std::fs::remove_dir_all(path);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}
