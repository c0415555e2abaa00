//! The multi-process harness shared by the integration tests.
//!
//! A test binary re-runs itself as the worker processes: each test starts `world`
//! copies of the ignored `worker` test of its own binary with a scenario in the
//! environment, then checks the `RESULT ...` line every rank printed. Workers write
//! to files (never to pipes that nobody drains), and every wait for them is bounded:
//! a rank still running at the deadline is killed and the test fails.
#![allow(dead_code)] // every test binary uses a different part of this module

pub mod hooked_store;
pub mod hosts;
pub mod peer_jobs;
pub mod quoted;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use symmwin::adapter::testing::PeerAddress;
use symmwin::adapter::testing::Request;
use symmwin::adapter::testing::Token;
use symmwin::{Config, FileStore, Group, GroupSpec, HostProvider, Provider};

/// Environment variable naming the scenario a worker runs.
pub const SCENARIO: &str = "SYMMWIN_TEST_SCENARIO";

/// How long a job may run unless a test says otherwise.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(120);

/// One scenario a worker process can run: `(rank, world)` to its result line.
pub type Scenario = fn(usize, usize) -> String;

/// Body of each binary's `worker` test: run the scenario named in the environment
/// (one of `scenarios`) and print its result.
pub fn worker_main(scenarios: &[(&str, Scenario)]) {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return; // run directly (e.g. `--ignored`): nothing to do
    };
    let Some(&(_, run)) = scenarios.iter().find(|(name, _)| *name == scenario) else {
        panic!("unknown scenario {scenario}");
    };
    let outcome = run(env_usize("RANK"), env_usize("WORLD"));
    println!("RESULT {outcome}");
}

/// The `worker` test of a test binary, the entry point of the worker processes its
/// other tests start: `common::worker! { "name" => scenario_fn, ... }`.
#[allow(unused_macros)] // binaries without worker processes
macro_rules! worker {
    ($($name:literal => $run:expr),+ $(,)?) => {
        #[test]
        #[ignore = "worker process entry point, started by the other tests"]
        fn worker() {
            common::worker_main(&[$(($name, $run)),+]);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use worker;

/// The environment entry setting the timeout of a job's ranks.
pub fn timeout_ms(ms: u64) -> (&'static str, String) {
    ("SYMMWIN_TIMEOUT_MS", ms.to_string())
}

/// The environment entry keeping a worker on one malloc arena: threads that play peers
/// must not make glibc map new arenas, which would look like leaks in a mapping count.
pub fn one_malloc_arena() -> (&'static str, String) {
    ("MALLOC_ARENA_MAX", "1".into())
}

/// A directory for one test under the system temp dir, named after this process and
/// removed with everything in it when the guard drops (as `tempfile::TempDir`). Not
/// created here: the library creates a socket directory itself, `0700`.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(std::env::temp_dir().join(format!(
            "symmwin-test-{tag}-{}-{:x}",
            std::process::id(),
            symmwin::adapter::testing::random_u64()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A [`Config`] whose socket directory is a [`TempDir`]: use it where a `&Config` is
/// wanted; the directory goes when it drops.
pub struct TestConfig {
    pub config: Config,
    _dir: TempDir,
}

impl TestConfig {
    /// `Config::default()` with its socket directory in a fresh [`TempDir`], then `edit`.
    pub fn new(tag: &str, edit: impl FnOnce(&mut Config)) -> TestConfig {
        let dir = TempDir::new(tag);
        let mut config = Config {
            socket_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        edit(&mut config);
        TestConfig { config, _dir: dir }
    }
}

impl std::ops::Deref for TestConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.config
    }
}

/// Files and directories under the temp dir and /dev/shm that a symmwin test process
/// `pid` left behind: names starting with "symmwin" that carry `-<pid>` whole.
pub fn leftovers_of(pid: u32) -> Vec<PathBuf> {
    let tag = format!("-{pid}");
    let carries_pid = |name: &str| {
        name.match_indices(&tag).any(|(at, _)| {
            let after = name[at + tag.len()..].chars().next();
            after.is_none_or(|c| !c.is_ascii_digit())
        })
    };
    [std::env::temp_dir(), PathBuf::from("/dev/shm")]
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("symmwin") && carries_pid(&name)
        })
        .map(|e| e.path())
        .collect()
}

/// A job's private directory (store, sockets, worker output), removed on drop.
pub struct Job {
    pub dir: PathBuf,
}

impl Job {
    pub fn new(name: &str) -> Job {
        let dir = std::env::temp_dir().join(format!(
            "symmwin-test-{name}-{}-{:x}",
            std::process::id(),
            symmwin::adapter::testing::random_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Job { dir }
    }

    pub fn store(&self) -> PathBuf {
        self.dir.join("store")
    }

    pub fn sockets(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// A worker command running `scenario` of this test binary (or of `exe`).
    pub fn command(&self, exe: &Path, scenario: &str, rank: usize, world: usize) -> Command {
        let mut cmd = Command::new(exe);
        cmd.args([
            "--ignored",
            "--exact",
            "worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, scenario)
        .env("RANK", rank.to_string())
        .env("WORLD", world.to_string())
        .env("STORE", self.store())
        .env("SYMMWIN_SOCKET_DIR", self.sockets())
        .env("SYMMWIN_TIMEOUT_MS", "5000")
        .stdin(Stdio::null());
        cmd
    }

    /// Start one worker process per rank running `scenario`.
    pub fn spawn(&self, world: usize, scenario: &str, env: &[(&str, String)]) -> Ranks {
        let exe = std::env::current_exe().unwrap();
        let tag = format!("{scenario}-{:x}", symmwin::adapter::testing::random_u64());
        let mut ranks = Ranks::default();
        for rank in 0..world {
            let files = (
                self.dir.join(format!("{tag}-{rank}.out")),
                self.dir.join(format!("{tag}-{rank}.err")),
            );
            let mut cmd = self.command(&exe, scenario, rank, world);
            cmd.stdout(std::fs::File::create(&files.0).unwrap())
                .stderr(std::fs::File::create(&files.1).unwrap());
            for (k, v) in env {
                cmd.env(k, v);
            }
            ranks.push(cmd.spawn().unwrap(), files);
        }
        ranks
    }

    /// Run `scenario` on `world` ranks and wait (at most [`DEFAULT_LIMIT`]).
    pub fn run(&self, world: usize, scenario: &str, env: &[(&str, String)]) -> Vec<Output> {
        self.spawn(world, scenario, env).wait(DEFAULT_LIMIT)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Running worker processes, indexed by rank.
#[derive(Default)]
pub struct Ranks {
    children: Vec<Child>,
    files: Vec<(PathBuf, PathBuf)>,
    status: Vec<Option<ExitStatus>>,
}

impl Ranks {
    fn push(&mut self, child: Child, files: (PathBuf, PathBuf)) {
        self.children.push(child);
        self.files.push(files);
        self.status.push(None);
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Process id of `rank`.
    pub fn pid(&self, rank: usize) -> u32 {
        self.children[rank].id()
    }

    /// `kill -9` one rank (a process this test started, by its pid).
    pub fn kill(&mut self, rank: usize) {
        let _ = self.children[rank].kill();
    }

    /// What `rank` has printed so far.
    pub fn stdout_so_far(&self, rank: usize) -> String {
        std::fs::read_to_string(&self.files[rank].0).unwrap_or_default()
    }

    /// Exit status of `rank` if it has exited.
    pub fn try_status(&mut self, rank: usize) -> Option<ExitStatus> {
        if self.status[rank].is_none() {
            self.status[rank] = self.children[rank].try_wait().unwrap();
        }
        self.status[rank]
    }

    /// Wait for every rank, at most `limit` from now. Ranks still running then are
    /// killed and the test fails, showing what each of them printed.
    pub fn wait(mut self, limit: Duration) -> Vec<Output> {
        let deadline = Instant::now() + limit;
        loop {
            let running: Vec<usize> = (0..self.len())
                .filter(|&r| self.try_status(r).is_none())
                .collect();
            if running.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for &r in &running {
                    self.kill(r);
                    let _ = self.children[r].wait();
                }
                let report: String = running
                    .iter()
                    .map(|&r| {
                        format!(
                            "--- rank {r} stdout:\n{}\n--- rank {r} stderr:\n{}\n",
                            self.stdout_so_far(r),
                            std::fs::read_to_string(&self.files[r].1).unwrap_or_default()
                        )
                    })
                    .collect();
                panic!("rank(s) {running:?} still running after {limit:?}: killed\n{report}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (0..self.len())
            .map(|r| Output {
                status: self.status[r].unwrap(),
                stdout: std::fs::read(&self.files[r].0).unwrap_or_default(),
                stderr: std::fs::read(&self.files[r].1).unwrap_or_default(),
            })
            .collect()
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        // A test that panicked half-way leaves no process behind.
        for r in 0..self.children.len() {
            if self.try_status(r).is_none() {
                self.kill(r);
                let _ = self.children[r].wait();
            }
        }
    }
}

/// The `RESULT ...` line a worker printed.
pub fn result(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| {
            panic!(
                "no result (status {}); stdout:\n{stdout}\nstderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Assert a worker exited 0, showing its output otherwise.
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Assert every worker exited 0; otherwise show every failing rank's output.
pub fn assert_all_success(outs: &[Output]) {
    let failed: String = outs
        .iter()
        .enumerate()
        .filter(|(_, out)| !out.status.success())
        .map(|(rank, out)| {
            format!(
                "--- rank {rank}: {}\nstdout:\n{}\nstderr:\n{}\n",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .collect();
    assert!(failed.is_empty(), "ranks failed:\n{failed}");
}

/// `key=value` fields of a result line.
pub fn field<'a>(result: &'a str, key: &str) -> &'a str {
    result
        .split_whitespace()
        .find_map(|part| part.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no field {key} in {result:?}"))
}

pub fn env_usize(name: &str) -> usize {
    std::env::var(name).unwrap().parse().unwrap()
}

/// Join group `name` on the job's file store with the host provider.
pub fn join_group(name: &str, rank: usize, world: usize) -> (Group, Arc<dyn Provider>) {
    join_wrapped(name, rank, world, |files| Arc::new(files))
}

/// The job's file store, as [`join_group`] uses it.
pub fn job_store() -> FileStore {
    FileStore::new(std::env::var("STORE").unwrap()).unwrap()
}

/// [`join_group`] through the store `wrap` makes of the job's file store (a store that
/// misbehaves on purpose, on the ranks the test picks).
pub fn join_wrapped(
    name: &str,
    rank: usize,
    world: usize,
    wrap: impl FnOnce(FileStore) -> Arc<dyn symmwin::Store>,
) -> (Group, Arc<dyn Provider>) {
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let store = wrap(job_store());
    let group = self::group(
        GroupSpec::new(name, rank, world),
        store,
        &provider,
        &Config::from_env().unwrap(),
    );
    (group, provider)
}

/// Join group `name` on the job's file store with a CUDA provider: rank r on GPU
/// r % GPUs, so several ranks share a GPU where there are fewer.
#[cfg(feature = "cuda")]
pub fn join_cuda(name: &str, rank: usize, world: usize) -> (Group, Arc<dyn Provider>) {
    let gpus = symmwin::adapter::cuda_device_count().unwrap().max(1) as usize;
    let device = (rank % gpus) as i32;
    let provider: Arc<dyn Provider> =
        Arc::new(symmwin::CudaProvider::new(device, symmwin::HandlePreference::Auto).unwrap());
    let group = self::group(
        GroupSpec::new(name, rank, world),
        Arc::new(job_store()),
        &provider,
        &Config::from_env().unwrap(),
    );
    (group, provider)
}

/// Join the group named "test".
pub fn join(rank: usize, world: usize) -> (Group, Arc<dyn Provider>) {
    join_group("test", rank, world)
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Memory mappings of this process.
pub fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// Wait (5 s at most) until every other thread of this process has started (it no
/// longer carries the name of the thread that spawned it) and sleeps, so that what a
/// thread maps as it starts (its signal stack, its malloc arena) is in a baseline of
/// mappings taken afterwards.
pub fn settle_threads() {
    let own = std::fs::read_link("/proc/thread-self").unwrap();
    let own_tid = own.file_name().unwrap().to_owned();
    let own_name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let settled = |t: &std::fs::DirEntry| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        t.file_name() == own_tid || (state == Some('S') && name != own_name)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap().flatten();
        if tasks.collect::<Vec<_>>().iter().all(settled) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Entries (sockets) in a directory; 0 when it does not exist.
pub fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// A small deterministic generator (xorshift64*), so runs are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Send one datagram with `fds` attached to the socket at `path` (blocking).
pub fn send_raw(path: &Path, bytes: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) {
    try_send_raw(path, bytes, fds).unwrap();
}

/// [`send_raw`], reporting failure instead of panicking (for probing sockets that may
/// refuse).
pub fn try_send_raw(
    path: &Path,
    bytes: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> rustix::io::Result<()> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    let addr = rustix::net::SocketAddrUnix::new(path)?;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(16))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(fds)));
    }
    rustix::net::sendmsg_addr(
        &sock,
        &addr,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .map(drop)
}

/// Exchange addresses of a fake rank 1 (`ours`) and the real rank 0 (`theirs`).
pub fn peer_addresses(theirs: &Request, ours: &Request) -> Vec<PeerAddress> {
    [theirs, ours]
        .iter()
        .map(|r| PeerAddress {
            socket: r.socket.clone(),
            pid: r.pid,
            token: Token::from_hex(&r.token).unwrap(),
        })
        .collect()
}

/// Join the group `spec` on `store` with `provider` and `config`; the join must work.
pub fn group(
    spec: GroupSpec,
    store: Arc<dyn symmwin::Store>,
    provider: &Arc<dyn Provider>,
    config: &Config,
) -> Group {
    Group::new(spec, store, provider.clone(), config).unwrap()
}

/// A fake rank 1 of two-rank group `group` on `store`: waits (up to 5 s) for rank 0's
/// published request and returns it with its own, rank 0's re-labelled as rank 1 with
/// `endpoint`'s socket and token.
pub fn fake_rank1_requests(
    store: &dyn symmwin::Store,
    group: &str,
    endpoint: &symmwin::adapter::testing::Endpoint,
) -> Result<(Request, Request), String> {
    let key = symmwin::adapter::testing::Namespace::new(group).request(0, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let bytes = loop {
        if let Some(b) = store.try_get(&key).map_err(|e| e.to_string())? {
            break b;
        }
        if Instant::now() > deadline {
            return Err("rank 0 never published".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let theirs = Request::decode("k", 0, &bytes).map_err(|e| e.to_string())?;
    let mut ours = theirs.clone();
    ours.rank = 1;
    ours.socket = endpoint.path().to_path_buf();
    ours.token = endpoint.token().to_hex();
    Ok((theirs, ours))
}

/// A fake rank 1's half of a rendezvous of a two-rank group `group` (sequence 0):
/// send rank 0 `handle` for `physical_size` bytes and take rank 0's, within `timeout`.
pub fn fake_rank1_all_gather(
    endpoint: &mut symmwin::adapter::testing::Endpoint,
    (group, physical_size): (&str, u64),
    (theirs, ours): (&Request, &Request),
    handle: &symmwin::adapter::SharedHandle,
    timeout: Duration,
) -> symmwin::Result<()> {
    let peers = peer_addresses(theirs, ours);
    let round = symmwin::adapter::testing::Round {
        group: symmwin::adapter::testing::stable_id(group),
        seq: 0,
        rank: 1,
        peers: &peers,
        targets: &[0],
        physical_size,
    };
    endpoint.all_gather(&round, handle, timeout).map(drop)
}

/// A well-formed fd-handle message of 4096 physical bytes from `sender` of a `world`-rank
/// group named `group`, for rendezvous `seq`, carrying the receiver's published token
/// (hex, as in its request): what a forger that read the store would send.
pub fn fd_message(
    group: &str,
    seq: u64,
    sender: u32,
    world: u32,
    token_hex: &str,
) -> symmwin::adapter::testing::Message {
    symmwin::adapter::testing::Message {
        group: symmwin::adapter::testing::stable_id(group),
        seq,
        sender,
        world,
        token: symmwin::adapter::testing::token_bytes(
            &Token::from_hex(token_hex).expect("a published token"),
        ),
        physical_size: 4096,
        offer: Default::default(),
        payload: symmwin::adapter::testing::Payload::Fd,
    }
}
