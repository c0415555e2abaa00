//! SIGTERM while the demo is still starting ranks: it stops at once and reaps every
//! rank it started. Alone in its own test binary: it makes this process a child
//! subreaper, so a rank the demo left unreaped is handed to it (and counted).

mod processes;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_while_ranks_start_stops_the_start_and_reaps_the_ranks_started() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and changes only us.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    // Small enough for the pre-flight check, large enough to take many seconds to start.
    let world = 300;
    let mut demo = Command::new(env!("CARGO_BIN_EXE_symmwin"))
        .args(["demo", "--world", &world.to_string(), "--size", "1K"])
        .args(["--iters", "1", "--provider", "host"])
        .env_remove("SYMMWIN_LOG")
        .env_remove("SYMMWIN_TIMEOUT_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let n = processes::children(demo.id()).len();
        if n >= 10 {
            break n;
        }
        assert!(Instant::now() < deadline, "the demo never started 10 ranks");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        started < world,
        "all {world} ranks started before the signal"
    );
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(demo.id() as i32, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(20) {
            let _ = demo.kill();
            let _ = demo.wait();
            panic!("the demo kept starting ranks for 20 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = signalled.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(took < Duration::from_millis(1500), "took {took:?}: {err}");
    assert!(err.contains("interrupted by signal 15"), "{err}");
    assert_eq!(processes::leftover_children(), 0, "ranks left unreaped");
}
