//! Security: tokens never reach logs or error messages, and everything a rendezvous
//! leaves on disk is private. (Another uid and a same-uid process without the token
//! are shut out: see `multiprocess.rs`.)
//!
//! Run: `cargo test -p symmwin --test security`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::hooked_store::{Hooked, StoreHooks};
use common::{assert_all_success, field, result, Job};
use symmwin::adapter::testing::Request;
use symmwin::adapter::testing::FABRIC_LEN;
use symmwin::SignalOptions;
use symmwin::{Allocation, Config, FileStore, GroupSpec, HostProvider, Provider};

common::worker! {
    "logged" => logged,
}

/// Store hooks remembering every request the store stored or handed out.
struct Recording {
    requests: Mutex<Vec<Vec<u8>>>,
}

impl Recording {
    fn note(&self, key: &str, value: &[u8]) {
        if key.contains("/req/") {
            self.requests.lock().unwrap().push(value.to_vec());
        }
    }

    fn tokens(&self) -> Vec<String> {
        let mut tokens: Vec<String> = self
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter_map(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
            .filter_map(|v| v["token"].as_str().map(str::to_owned))
            .collect();
        tokens.sort();
        tokens.dedup();
        tokens
    }

    /// The request of `rank` (as last seen).
    fn request_of(&self, rank: usize) -> Request {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .rev()
            .filter_map(|v| serde_json::from_slice::<Request>(v).ok())
            .find(|r| r.rank == rank)
            .unwrap()
    }
}

impl StoreHooks for Recording {
    fn before_set(&self, key: &str, value: &[u8]) {
        self.note(key, value);
    }

    fn after_get(&self, key: &str, value: Option<&[u8]>) {
        if let Some(v) = value {
            self.note(key, v);
        }
    }
}

/// Two ranks log everything (`SYMMWIN_LOG=trace`, to stderr, as the CLI does) while
/// they rendezvous, reject forged and stale messages, and hit a mismatch, a signal
/// timeout and a corrupt request. Every error's Display and Debug, and the Debug of
/// every object involved, goes to stderr too. The tokens go to a file for the parent.
fn logged(rank: usize, world: usize) -> String {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("SYMMWIN_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let store = Arc::new(Hooked {
        inner: common::job_store(),
        hooks: Recording {
            requests: Mutex::default(),
        },
    });
    let group = common::group(
        GroupSpec::new("logged", rank, world),
        store.clone(),
        &provider,
        &Config::from_env().unwrap(),
    );
    let show = |what: &str, text: String| eprintln!("{what}: {text}");

    // 1. A successful rendezvous (window and pad pool: two exchanges).
    let alloc = Allocation::new(provider.clone(), 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    window.barrier(SignalOptions::default()).unwrap();

    // 2. Rank 1 sends rank 0 garbage, a forged message and a stale valid one (seq 0,
    //    right token): rank 0 logs a rejection and a dropped stale handle.
    if rank == 1 {
        let theirs = store.hooks.request_of(0);
        let token = symmwin::adapter::testing::Token::from_hex(&theirs.token).unwrap();
        let memory = provider.create(4096).unwrap();
        let symmwin::adapter::SharedHandle::Fd(fd) = memory.export().unwrap() else {
            unreachable!()
        };
        let fds = [std::os::fd::AsFd::as_fd(&fd)];
        common::send_raw(&theirs.socket, b"garbage", &[]);
        let mut stale = common::fd_message("logged", 0, 1, 2, &"00".repeat(16));
        let mut buf = [0u8; FABRIC_LEN];
        common::send_raw(&theirs.socket, stale.encode(&mut buf), &fds);
        stale.token = symmwin::adapter::testing::token_bytes(&token);
        common::send_raw(&theirs.socket, stale.encode(&mut buf), &fds);
    }
    let second = Allocation::new(provider.clone(), 4096).unwrap();
    let window2 = group.rendezvous(&second).unwrap();
    window2.barrier(SignalOptions::default()).unwrap();

    // 3. Errors: a size mismatch, a signal timeout, a corrupt (truncated) request.
    let odd = Allocation::new(provider.clone(), 4096 * (1 + rank)).unwrap();
    let mismatch = group.rendezvous(&odd).unwrap_err();
    let timeout = window
        .wait_signal(
            1 - rank,
            SignalOptions::channel(3).timeout(Duration::from_millis(20)),
        )
        .unwrap_err();
    let own = serde_json::to_vec(&store.hooks.request_of(rank)).unwrap();
    let cut = own.len() - 20; // inside the token string
    let corrupt = Request::decode("symmwin/logged/9/req/0", rank, &own[..cut]).unwrap_err();
    for (what, e) in [
        ("mismatch", &mismatch),
        ("timeout", &timeout),
        ("corrupt", &corrupt),
    ] {
        show(what, format!("{e} | {e:?} | {:?}", e.kind()));
    }
    show("request", format!("{:?}", store.hooks.request_of(0)));
    show("request", format!("{:?}", store.hooks.request_of(1)));
    show("group", format!("{group:?}"));
    show("window", format!("{window:?}"));
    // `window` is poisoned by the timeout above; the other window keeps working.
    window2.barrier(SignalOptions::channel(1)).unwrap();
    let tokens = store.hooks.tokens();
    let dir = PathBuf::from(std::env::var("STORE").unwrap());
    std::fs::write(
        dir.with_file_name(format!("tokens-{rank}")),
        tokens.join("\n"),
    )
    .unwrap();
    format!(
        "tokens={} rejected={}",
        tokens.len(),
        group.rejected_messages()
    )
}

/// Every spelling of a token a formatter might produce.
fn spellings(hex: &str) -> Vec<String> {
    let bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    vec![
        hex.to_owned(),
        hex.to_uppercase(),
        format!("{bytes:?}"),  // [1, 2, ...]
        format!("{bytes:x?}"), // [1, 2, ...] in hex
        hex[..12].to_owned(),  // a prefix is a leak too
    ]
}

#[test]
fn tokens_never_appear_in_logs_or_error_messages() {
    let job = Job::new("tokens");
    let outs = job
        .spawn(
            2,
            "logged",
            &[("SYMMWIN_LOG", "trace".into()), common::timeout_ms(3000)],
        )
        .wait(common::DEFAULT_LIMIT);
    assert_all_success(&outs);
    let mut tokens = Vec::new();
    for (rank, out) in outs.iter().enumerate() {
        let r = result(out);
        assert_eq!(field(&r, "tokens"), "2", "{r}");
        let text = std::fs::read_to_string(job.dir.join(format!("tokens-{rank}"))).unwrap();
        tokens.extend(text.lines().map(str::to_owned));
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 2, "one token per rank's socket");
    let r0 = result(&outs[0]);
    assert_eq!(field(&r0, "rejected"), "2", "garbage and forged: {r0}");

    let mut logged = String::new();
    for out in &outs {
        logged.push_str(&String::from_utf8_lossy(&out.stdout));
        logged.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    // The log did capture the library's messages, at every level.
    assert!(logged.contains("WARN"), "{logged}");
    assert!(logged.contains("rejected a message"), "{logged}");
    assert!(logged.contains("dropping stale handle"), "{logged}");
    assert!(logged.contains("ranks disagree on size"), "{logged}");
    for token in &tokens {
        for s in spellings(token) {
            assert!(!logged.contains(&s), "token leaked as {s:?}:\n{logged}");
        }
    }
    // Requests were printed with Debug, and their token field redacted.
    assert!(logged.contains("token: \"<redacted>\""), "{logged}");
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn sockets_are_0600_in_a_0700_directory_and_the_store_is_0700() {
    let job = Job::new("modes");
    // Both directories are created by the library (they do not exist yet).
    let sockets = job.dir.join("a/b/sockets");
    std::fs::create_dir_all(sockets.parent().unwrap()).unwrap();
    let store_dir = job.dir.join("c/d/store");
    let store = Arc::new(FileStore::new(&store_dir).unwrap());
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let mut config = Config::from_env().unwrap();
    config.socket_dir = sockets.clone();
    let group = common::group(
        GroupSpec::new("modes", 0, 1),
        store.clone(),
        &provider,
        &config,
    );
    let alloc = Allocation::new(provider, 4096).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    assert_eq!(mode(&sockets), 0o700, "socket directory");
    let socks: Vec<_> = std::fs::read_dir(&sockets).unwrap().flatten().collect();
    assert_eq!(socks.len(), 1);
    assert_eq!(mode(&socks[0].path()), 0o600, "socket");
    assert!(std::os::unix::fs::FileTypeExt::is_socket(
        &socks[0].file_type().unwrap()
    ));
    assert_eq!(mode(&store_dir), 0o700, "store directory");
    // Intermediate store directories are private too.
    assert_eq!(mode(store_dir.parent().unwrap()), 0o700, "store parent");
    drop(window);
    drop(group);
    assert_eq!(
        common::entries(&sockets),
        0,
        "the socket goes with its group"
    );
}
