//! The C guide's example (examples/c), built with its Makefile against the static
//! library this test run built, run as two processes on host memory as docs/c.md
//! says: both ranks read the other's greeting, and nothing is left behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The static library cargo built for this run, beside this test's executable. Its
/// name carries cargo's hash; of several (builds with other features, or of other
/// checkouts sharing the target directory), the newest is taken.
fn static_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let newest = std::fs::read_dir(deps)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("libsymmwin_capi-") && name.ends_with(".a")
        })
        .max_by_key(|path| path.metadata().and_then(|m| m.modified()).ok());
    newest.unwrap_or_else(|| panic!("no libsymmwin_capi-*.a in {}", deps.display()))
}

/// A directory of this test's own, short enough for socket paths (under the system's
/// temporary directory), removed when dropped, also when an assert fails.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("symmwin-c-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The example's program, built once for the tests of this run (in a directory kept
/// between runs: make rebuilds it when the library or the source is newer).
fn program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("symmwin-c-example");
        std::fs::create_dir_all(&out).unwrap();
        build(&out)
    })
}

fn build(out: &Path) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c");
    let status = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&example)
        .arg(format!("SYMMWIN_LIB={}", static_library().display()))
        .arg(format!("BUILD={}", out.display()))
        .status()
        .expect("make runs (it builds the C example)");
    assert!(status.success(), "building examples/c failed: {status}");
    out.join("two_ranks")
}

fn rank(program: &Path, store: &Path, sockets: &Path, rank: &str) -> Child {
    Command::new(program)
        .arg(store)
        .arg(rank)
        .env("SYMMWIN_SOCKET_DIR", sockets)
        .env("SYMMWIN_TIMEOUT_MS", "20000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Its exit code and output, or a kill once `deadline` has passed.
fn finish(mut child: Child, deadline: Instant) -> (Option<i32>, String) {
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn the_c_example_runs_as_two_processes() {
    let root = Scratch::new("run");
    let program = program();
    let (store, sockets) = (root.0.join("store"), root.0.join("sockets"));
    let ranks = [
        rank(program, &store, &sockets, "0"),
        rank(program, &store, &sockets, "1"),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    for (r, child) in ranks.into_iter().enumerate() {
        let (code, output) = finish(child, deadline);
        assert_eq!(code, Some(0), "rank {r}: {output}");
        let expected = format!("rank {r}: \"hello from rank {}\"", 1 - r);
        assert!(output.contains(&expected), "rank {r}: {output}");
    }
    let left: Vec<_> = std::fs::read_dir(&sockets).unwrap().collect();
    assert!(left.is_empty(), "socket files left behind: {left:?}");
}

#[test]
fn the_c_example_prints_the_last_error_when_a_call_fails() {
    let root = Scratch::new("error");
    let program = program();
    // A store directory others can read is refused before any rank waits.
    let open = root.0.join("open-store");
    std::fs::create_dir(&open).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = rank(program, &open, &root.0.join("sockets"), "0");
    let (code, output) = finish(child, Instant::now() + Duration::from_secs(30));
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("rank 0: symmwin_file_store(store_dir, &store): status 7: symmwin")
            && output.contains("has mode 755"),
        "{output}"
    );
}

#[test]
fn the_guide_links_with_the_makefiles_libraries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let makefile = std::fs::read_to_string(root.join("examples/c/Makefile")).unwrap();
    let guide = std::fs::read_to_string(root.join("docs/c.md")).unwrap();
    let libraries = makefile
        .lines()
        .find_map(|line| line.strip_prefix("LDLIBS += "))
        .expect("the Makefile sets LDLIBS");
    assert!(
        guide.contains(libraries),
        "docs/c.md's cc line does not link {libraries}"
    );
}
