//! A run that cannot fit the machine is refused before any rank is started. Alone in
//! its own test binary: it makes this process a child subreaper, so any rank the
//! command did fork would be handed to it (and counted) when the command exits.

mod processes;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_world_of_a_million_is_refused_without_forking_a_rank() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and changes only us.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_symmwin"))
        .args(["demo", "--world", "1000000", "--provider", "host"])
        .env_remove("SYMMWIN_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.starts_with("symmwin setup failed: world 1000000 x 4 MiB needs "),
        "{err}"
    );
    assert!(
        err.contains("of host memory") && err.contains("available"),
        "{err}"
    );
    assert!(err.contains("--size or --world lower it"), "{err}");
    assert!(err.trim_end().ends_with("(no rank was started)"), "{err}");
    // Each shortfall on a line of its own, none a wall of text.
    for line in err.lines() {
        assert!(line.len() < 300, "a {}-character line: {line}", line.len());
    }
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes::leftover_children(),
        0,
        "the command forked ranks"
    );
}
