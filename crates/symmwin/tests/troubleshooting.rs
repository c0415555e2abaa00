//! Keeps docs/troubleshooting.md true: each quoted message is produced here for real
//! and must appear on that page (after normalising times).

use std::sync::Arc;
use std::time::Duration;

use symmwin::{Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider};
#[cfg(feature = "cuda")]
use symmwin::{CudaProvider, HandlePreference};

fn page() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/troubleshooting.md"
    ))
    .unwrap()
}

/// `after 0.30021s waiting` and `after 300ms waiting` both become `after <t> waiting`.
fn normalise(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(i) = rest.find("after ") {
        out.push_str(&rest[..i + 6]);
        rest = &rest[i + 6..];
        let end = rest.find(' ').unwrap_or(rest.len());
        if rest[..end]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
        {
            out.push_str("<t>");
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

fn assert_quoted(message: &str) {
    let page = normalise(&page());
    let message = normalise(message);
    assert!(
        page.lines().any(|l| l == message),
        "docs/troubleshooting.md does not quote:\n{message}"
    );
}

fn config(tag: &str) -> Config {
    Config {
        timeout: Duration::from_millis(300),
        socket_dir: std::env::temp_dir().join(format!("symmwin-ts-{tag}-{}", std::process::id())),
        ..Config::default()
    }
}

/// Run `world` ranks as threads, each allocating `size(rank)`; rank `absent` never joins.
fn threads(
    world: usize,
    absent: Option<usize>,
    size: fn(usize) -> usize,
    tag: &str,
) -> Vec<String> {
    let store = Arc::new(MemoryStore::new());
    let ranks: Vec<_> = (0..world)
        .filter(|&r| Some(r) != absent)
        .map(|rank| {
            let store = store.clone();
            let config = config(tag);
            std::thread::spawn(move || {
                let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
                let group = Group::new(
                    GroupSpec::new("ts", rank, world),
                    store,
                    provider.clone(),
                    &config,
                )
                .unwrap();
                let alloc = Allocation::new(provider, size(rank)).unwrap();
                group.rendezvous(&alloc).unwrap_err().to_string()
            })
        })
        .collect();
    let errors = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    // The ranks' socket directory, which the library created: leave nothing behind.
    let _ = std::fs::remove_dir_all(config(tag).socket_dir);
    errors
}

/// Say on the terminal, past the test harness's capture, that a check could not run
/// on this machine (a passing test's own output is hidden).
#[cfg(feature = "cuda")]
fn skip(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// The page's message is what a machine without libcuda.so gets; a machine with a
/// driver cannot produce it, and says so rather than passing unchecked.
#[cfg(feature = "cuda")]
#[test]
fn no_driver() {
    match CudaProvider::new(0, HandlePreference::Auto) {
        Err(e) if e.to_string().contains("libcuda.so could not be loaded") => {
            assert!(matches!(e.kind(), symmwin::ErrorKind::NoDriver(_)), "{e}");
            assert_quoted(&e.to_string())
        }
        Err(e) => skip(
            "no_driver",
            &format!("needs a machine without libcuda.so; here: {e}"),
        ),
        Ok(p) => skip(
            "no_driver",
            &format!(
                "needs a machine without libcuda.so; CUDA device {} works here",
                p.device()
            ),
        ),
    }
}

/// The message only a GPU whose driver refuses fabric handles produces (no IMEX
/// channel, or no fabric manager): there `cuMemCreate` answers NOT_PERMITTED.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA GPU that refuses fabric handles (no IMEX channel)"]
fn fabric_not_permitted() {
    match CudaProvider::new(0, HandlePreference::Fabric) {
        Err(e) if e.to_string().contains("NOT_PERMITTED") => assert_quoted(&e.to_string()),
        Err(e) => panic!("needs a GPU whose driver refuses fabric handles, got: {e}"),
        Ok(_) => panic!("needs a GPU whose driver refuses fabric handles; they work here"),
    }
}

#[test]
fn socket_directory_not_private() {
    // A name of this run's own, removed after: a fixed one would be left for another
    // user's run on this machine, which could then not create it.
    let root = std::env::temp_dir().join(format!("symmwin-ts-open-{}", std::process::id()));
    let open = root.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = Config {
        socket_dir: open.clone(),
        ..Config::default()
    };
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let err = Group::new(
        GroupSpec::new("ts", 0, 1),
        Arc::new(MemoryStore::new()),
        provider,
        &config,
    )
    .unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    // The page shows the directory as DIR.
    assert_quoted(&err.to_string().replace(&*open.to_string_lossy(), "DIR"));
}

#[test]
fn timeout_naming_a_rank() {
    let errors = threads(3, Some(2), |_| 4096, "timeout");
    assert_quoted(&errors[0]);
    assert!(
        errors[1].contains("waiting for rank(s) [2]"),
        "{}",
        errors[1]
    );
}

#[test]
fn size_mismatch() {
    let errors = threads(3, None, |r| if r == 1 { 8192 } else { 4096 }, "mismatch");
    assert_quoted(&errors[0]);
    for e in &errors {
        assert!(
            e.contains("ranks disagree on size: 4096 on rank(s) [0, 2]; 8192 on rank(s) [1]"),
            "{e}"
        );
    }
}

/// The error of rank 0's device barrier on channel 1 that ended waiting for rank 3
/// (which `exited`, or did not come in time).
fn barrier_on_rank_0_lost(
    exited: Option<symmwin::PeerExit>,
    waited: Duration,
    limit: Duration,
) -> symmwin::Error {
    let timeout = symmwin::DeviceTimeout {
        exited,
        op: "barrier",
        channel: 1,
        rank: 0,
        missing: vec![3],
        unlisted: 0,
        waited,
        limit,
    };
    symmwin::Error::new(
        symmwin::Phase::Signal,
        symmwin::ErrorKind::ContextLost(Box::new(timeout)),
    )
    .at_rank(0)
    .with_peer(3)
}

#[test]
fn device_wait_timed_out() {
    // The error every symmwin call raises after a device wait trapped, built from the
    // record the kernel leaves (the GPU tests produce it for real: timeout_tests.rs).
    let err = barrier_on_rank_0_lost(
        None,
        Duration::from_micros(5_000_212),
        Duration::from_secs(5),
    );
    assert!(err.is_context_lost());
    assert_quoted(&err.to_string());
}

#[test]
fn device_wait_for_a_peer_that_exited() {
    // As above, for a wait that ended because the peer's process ended (its exit mark;
    // the GPU tests produce it for real: cuda_peer_death.rs).
    let exit = symmwin::PeerExit {
        pid: 4242,
        how: "exited".into(),
    };
    let err = barrier_on_rank_0_lost(
        Some(exit),
        Duration::from_millis(590),
        Duration::from_secs(60),
    );
    assert!(err.is_context_lost() && !err.is_timeout());
    assert_quoted(&err.to_string());
}
