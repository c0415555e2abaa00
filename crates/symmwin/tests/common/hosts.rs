//! Groups that span hosts on the host provider, in one process: ranks run as
//! threads, split into "hosts" by `Config::host_id` (what `SYMMWIN_HOST_ID` sets).
//! Peers of another host are never mapped and are reached through a [`RemotePeers`]
//! backend; an in-process mailbox stands in for the process group.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use symmwin::adapter::{Direction, Flag, RemoteFailure, RemotePeers, Transfer};
use symmwin::{Config, Group, GroupSpec, HostProvider, MemoryStore, Provider};

/// Queued messages by (from, to, tag).
type Queues = HashMap<(usize, usize, u32), Vec<Vec<u8>>>;

/// Messages in flight between ranks.
#[derive(Default)]
pub struct Mailbox {
    queues: Mutex<Queues>,
    arrived: Condvar,
    /// Data messages (op transfers, not flags) sent so far.
    data_sent: std::sync::atomic::AtomicUsize,
}

impl Mailbox {
    /// Data messages of ops sent so far.
    pub fn data_sent(&self) -> usize {
        self.data_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Messages sent and not yet received.
    pub fn in_flight(&self) -> usize {
        self.queues.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// One rank's end of the mailbox: what a process-group backend would be.
pub struct MailboxPeers {
    rank: usize,
    mailbox: Arc<Mailbox>,
    pub calls: Mutex<Vec<Vec<Flag>>>,
}

impl MailboxPeers {
    /// Rank `rank`'s end of `mailbox`.
    pub fn new(rank: usize, mailbox: Arc<Mailbox>) -> Self {
        MailboxPeers {
            rank,
            mailbox,
            calls: Mutex::default(),
        }
    }

    fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) {
        let mut queues = self.mailbox.queues.lock().unwrap();
        queues.entry((self.rank, to, tag)).or_default().push(bytes);
        self.mailbox.arrived.notify_all();
    }

    fn recv(&self, from: usize, tag: u32, timeout: Duration) -> Result<Vec<u8>, RemoteFailure> {
        let deadline = Instant::now() + timeout;
        let mut queues = self.mailbox.queues.lock().unwrap();
        loop {
            if let Some(bytes) = queues
                .get_mut(&(from, self.rank, tag))
                .filter(|q| !q.is_empty())
                .map(|q| q.remove(0))
            {
                return Ok(bytes);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RemoteFailure {
                    peer: Some(from),
                    timed_out: true,
                    message: "no message".into(),
                    also_waited_for: Vec::new(),
                });
            }
            queues = self.mailbox.arrived.wait_timeout(queues, left).unwrap().0;
        }
    }
}

/// A process-group backend for ranks that never signal across hosts (a test of
/// mappings only): every call fails.
pub struct NoMessages;

impl NoMessages {
    fn refused() -> RemoteFailure {
        RemoteFailure {
            peer: None,
            timed_out: false,
            message: "this test sends nothing across hosts".into(),
            also_waited_for: Vec::new(),
        }
    }
}

impl RemotePeers for NoMessages {
    fn flags(&self, _: &[Flag], _: Duration, _: usize) -> Result<(), RemoteFailure> {
        Err(Self::refused())
    }

    fn transfer(&self, _: &[Transfer], _: Duration, _: usize) -> Result<(), RemoteFailure> {
        Err(Self::refused())
    }
}

impl RemotePeers for MailboxPeers {
    fn flags(
        &self,
        flags: &[Flag],
        timeout: Duration,
        _stream: usize,
    ) -> Result<(), RemoteFailure> {
        self.calls.lock().unwrap().push(flags.to_vec());
        for f in flags.iter().filter(|f| f.direction == Direction::Send) {
            self.send(f.peer, f.tag, vec![0]);
        }
        for f in flags.iter().filter(|f| f.direction == Direction::Recv) {
            self.recv(f.peer, f.tag, timeout)?;
        }
        Ok(())
    }

    fn transfer(
        &self,
        transfers: &[Transfer],
        timeout: Duration,
        _stream: usize,
    ) -> Result<(), RemoteFailure> {
        for t in transfers.iter().filter(|t| t.direction == Direction::Send) {
            // SAFETY: the caller keeps `len` readable bytes at `ptr` for the call.
            let bytes = unsafe { std::slice::from_raw_parts(t.ptr as *const u8, t.len) };
            self.mailbox
                .data_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.send(t.peer, t.tag, bytes.to_vec());
        }
        for t in transfers.iter().filter(|t| t.direction == Direction::Recv) {
            let bytes = self.recv(t.peer, t.tag, timeout)?;
            // SAFETY: the caller keeps `len` writable bytes at `ptr` for the call.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    t.ptr as *mut u8,
                    t.len.min(bytes.len()),
                )
            };
        }
        Ok(())
    }
}

/// The configuration of a rank on `host` whose sockets live in `sockets` (one
/// directory for every rank of a test, removed with it).
pub fn config(host: &str, sockets: &super::TempDir) -> Config {
    Config {
        timeout: Duration::from_millis(2000),
        socket_dir: sockets.path().to_path_buf(),
        host_id: Some(host.to_owned()),
        ..Config::default()
    }
}

/// Run `body(rank, group)` on one thread per rank, rank r on host `hosts[r]`.
pub fn spanning<T: Send>(
    tag: &str,
    hosts: &[&str],
    remote: Option<&Arc<Mailbox>>,
    body: impl Fn(usize, Group) -> T + Sync,
) -> Vec<T> {
    spanning_in(Arc::new(MemoryStore::new()), tag, hosts, remote, body)
}

/// [`spanning`] with the group's store given.
pub fn spanning_in<T: Send>(
    store: Arc<MemoryStore>,
    tag: &str,
    hosts: &[&str],
    remote: Option<&Arc<Mailbox>>,
    body: impl Fn(usize, Group) -> T + Sync,
) -> Vec<T> {
    let world = hosts.len();
    let sockets = super::TempDir::new(&format!("hosts-{tag}"));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let store = store.clone();
                let body = &body;
                let config = config(hosts[rank], &sockets);
                s.spawn(move || {
                    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
                    let group =
                        Group::new(GroupSpec::new(tag, rank, world), store, provider, &config)
                            .unwrap();
                    if let Some(mailbox) = remote {
                        group.set_remote_peers(Arc::new(MailboxPeers {
                            rank,
                            mailbox: mailbox.clone(),
                            calls: Mutex::default(),
                        }));
                    }
                    body(rank, group)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
