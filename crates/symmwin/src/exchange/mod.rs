//! All-gather of shareable handles over Unix datagram sockets.
//!
//! Each rank binds one socket per group in a private directory. A message carries
//! the sender's rank, the rendezvous id (group id and sequence) and the receiver's
//! token, which the sender can only know by reading the receiver's request from the
//! store. The kernel attaches the sender's pid and uid (`SO_PASSCRED`), so a message
//! is accepted only from the process that published that rank's request, under our
//! uid, with the right token. Everything else is dropped (its fds closed) and logged.

pub mod wire;

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::error::{Error, ErrorKind, Phase, Result};
use crate::provider::SharedHandle;
use crate::token::Token;
use wire::{Message, Payload, FABRIC_LEN};

/// Where one peer listens and what it expects from us.
#[derive(Debug, Clone)]
pub struct PeerAddress {
    /// Socket path.
    pub socket: PathBuf,
    /// Pid that owns the socket (from its request).
    pub pid: u32,
    /// The token that peer requires in our messages.
    pub token: Token,
}

/// One rendezvous, as the exchange sees it.
#[derive(Debug)]
pub struct Round<'a> {
    /// Group id.
    pub group: u64,
    /// Sequence number within the group.
    pub seq: u64,
    /// Our rank.
    pub rank: usize,
    /// Every rank's address, indexed by rank (our own entry is ignored).
    pub peers: &'a [PeerAddress],
    /// The ranks to exchange with: those whose handles travel over the socket.
    pub targets: &'a [usize],
    /// Size of the memory every handle refers to.
    pub size: u64,
}

/// A received, authenticated handle not yet consumed (it arrived early).
#[derive(Debug)]
struct Early {
    sender: usize,
    /// The sending process, as the kernel reported it: checked again against the
    /// request of the rendezvous the handle is for once that request is read.
    pid: Option<u32>,
    world: usize,
    size: u64,
    handle: SharedHandle,
}

/// This rank's socket for one group.
#[derive(Debug)]
pub struct Endpoint {
    socket: OwnedFd,
    path: PathBuf,
    token: Token,
    uid: u32,
    /// Handles for rendezvous we have not reached yet, keyed by (group, seq).
    early: HashMap<(u64, u64), Vec<Early>>,
    /// Messages dropped since creation (for tests and diagnostics).
    rejected: u64,
    /// Datagrams whose attached fds the kernel dropped (`MSG_CTRUNC`) since creation:
    /// this process was at its open-file limit when they arrived.
    fds_dropped: u64,
    /// Traffic since creation: messages sent, handles accepted.
    counts: ExchangeCounts,
}

/// What an endpoint has sent and accepted since it was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeCounts {
    /// Datagrams sent (one per peer per rendezvous).
    pub sent: u64,
    /// Handles accepted (one per peer per rendezvous); each fd is closed after import.
    pub accepted: u64,
}

impl Endpoint {
    /// Bind a new socket with a fresh token in the private directory `dir`.
    pub fn bind(dir: &Path, label: u64) -> Result<Self> {
        crate::private_dir::ensure(dir, "socket directory", "the sockets", Phase::Exchange)?;
        remove_stale_sockets(dir);
        let token = Token::random()?;
        let path = dir.join(format!(
            "{}-{label:016x}-{:016x}.sock",
            std::process::id(),
            crate::token::random_u64()
        ));
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| Error::os(Phase::Exchange, "socket", e))?;
        let addr = SocketAddrUnix::new(&path).map_err(|e| {
            Error::new(
                Phase::Exchange,
                ErrorKind::InvalidArgument(format!(
                    "socket path {} is not usable ({e}); set SYMMWIN_SOCKET_DIR to a shorter directory",
                    path.display()
                )),
            )
        })?;
        rustix::net::bind(&socket, &addr).map_err(|e| Error::os(Phase::Exchange, "bind", e))?;
        own_sockets().push(path.clone());
        // The directory already shuts out other users; the mode is a second lock.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::os(Phase::Exchange, "chmod(socket)", e))?;
        rustix::net::sockopt::set_socket_passcred(&socket, true)
            .map_err(|e| Error::os(Phase::Exchange, "setsockopt(SO_PASSCRED)", e))?;
        Ok(Endpoint {
            socket,
            path,
            token,
            uid: rustix::process::getuid().as_raw(),
            early: HashMap::new(),
            rejected: 0,
            fds_dropped: 0,
            counts: ExchangeCounts::default(),
        })
    }

    /// The socket path peers send to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token peers must echo.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Messages dropped since this endpoint was bound.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Messages sent and handles accepted since this endpoint was bound.
    pub fn counts(&self) -> ExchangeCounts {
        self.counts
    }

    /// Send `handle` to every peer and receive one handle from each, in any order.
    /// Returns handles indexed by rank (`None` at our own rank).
    pub fn all_gather(
        &mut self,
        round: &Round<'_>,
        handle: &SharedHandle,
        timeout: Duration,
    ) -> Result<Vec<Option<SharedHandle>>> {
        let world = round.peers.len();
        let deadline = Instant::now() + timeout;
        let fds_dropped_before = self.fds_dropped;
        let mut received: Vec<Option<SharedHandle>> = (0..world).map(|_| None).collect();
        for early in self
            .early
            .remove(&(round.group, round.seq))
            .unwrap_or_default()
        {
            self.accept(round, early, &mut received)?;
        }
        let mut unsent: Vec<usize> = round.targets.to_vec();
        loop {
            let mut full = Vec::new();
            let mut lost = Vec::new();
            for peer in unsent {
                match self.try_send(round, peer, handle) {
                    Ok(true) => self.counts.sent += 1,
                    Ok(false) => full.push(peer),
                    Err(e) => lost.push((peer, e)),
                }
            }
            if !lost.is_empty() {
                return Err(most_likely_lost(round, lost));
            }
            unsent = full;
            let missing: Vec<usize> = round
                .targets
                .iter()
                .copied()
                .filter(|&r| received[r].is_none())
                .collect();
            if missing.is_empty() && unsent.is_empty() {
                return Ok(received);
            }
            let now = Instant::now();
            if now >= deadline {
                let mut waiting = missing;
                waiting.extend(&unsent);
                waiting.sort_unstable();
                waiting.dedup();
                if self.fds_dropped > fds_dropped_before {
                    return Err(crate::limits::fd_limit_error(
                        self.fds_dropped - fds_dropped_before,
                        &waiting,
                    ));
                }
                return Err(Error::new(
                    Phase::Exchange,
                    ErrorKind::Timeout {
                        missing: waiting,
                        waited: timeout,
                    },
                ));
            }
            // While sends are pending, poll briefly so they are retried soon.
            let wait = if unsent.is_empty() {
                deadline - now
            } else {
                Duration::from_millis(1).min(deadline - now)
            };
            if self.wait_readable(wait)? {
                while let Some(msg) = self.receive_one()? {
                    self.route(round, msg, &mut received)?;
                }
            }
        }
    }

    /// Send to `peer`; `Ok(false)` when its queue is full and we should retry.
    fn try_send(&self, round: &Round<'_>, peer: usize, handle: &SharedHandle) -> Result<bool> {
        let address = &round.peers[peer];
        let message = Message {
            group: round.group,
            seq: round.seq,
            sender: round.rank as u32,
            world: round.peers.len() as u32,
            token: address.token.0,
            size: round.size,
            payload: match handle {
                SharedHandle::Fd(_) => Payload::Fd,
                SharedHandle::Fabric(bytes) => Payload::Fabric(*bytes),
            },
        };
        let mut buf = [0u8; FABRIC_LEN];
        let bytes = message.encode(&mut buf);
        // The path comes from the store, which other users may be able to write (a
        // TCP store is open to the machine). Only send handles to sockets that live in a
        // private directory of ours, so a forged request cannot divert memory elsewhere.
        check_peer_socket(&address.socket, self.uid).map_err(|e| e.with_peer(peer))?;
        let addr = SocketAddrUnix::new(&address.socket)
            .map_err(|e| Error::os(Phase::Exchange, "socket address", e).with_peer(peer))?;
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let SharedHandle::Fd(fd) = handle {
            fds = [fd.as_fd()];
            control.push(SendAncillaryMessage::ScmRights(&fds));
        }
        match rustix::net::sendmsg_addr(
            &self.socket,
            &addr,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        ) {
            Ok(_) => Ok(true),
            Err(Errno::AGAIN) => Ok(false),
            Err(Errno::CONNREFUSED | Errno::NOENT) => Err(Error::new(
                Phase::Exchange,
                ErrorKind::PeerLost(format!(
                    "rank {peer} (pid {}) is not listening on {}",
                    address.pid,
                    shown(&address.socket)
                )),
            )
            .with_peer(peer)),
            Err(e) => Err(Error::os(Phase::Exchange, "sendmsg", e).with_peer(peer)),
        }
    }

    fn wait_readable(&self, wait: Duration) -> Result<bool> {
        let ts = rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: wait.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => Ok(n > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(Error::os(Phase::Exchange, "poll", e)),
        }
    }

    /// One datagram with its credentials and fds, or `None` when the queue is empty.
    fn receive_one(&mut self) -> Result<Option<Received>> {
        let mut buf = [0u8; FABRIC_LEN + 1];
        // Room for more fds than a valid message carries, so that extra ones arrive
        // as owned fds we close, instead of truncating the control data.
        let mut space =
            [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8), ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let msg = match rustix::net::recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(Errno::AGAIN) => return Ok(None),
            Err(Errno::INTR) => return Ok(None),
            Err(e) => return Err(Error::os(Phase::Exchange, "recvmsg", e)),
        };
        let mut fds = Vec::new();
        let mut cred = None;
        for item in control.drain() {
            match item {
                RecvAncillaryMessage::ScmRights(rights) => fds.extend(rights),
                RecvAncillaryMessage::ScmCredentials(c) => cred = Some(c),
                _ => {}
            }
        }
        let truncated = msg
            .flags
            .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC);
        if msg.flags.contains(ReturnFlags::CTRUNC) {
            // Our control buffer has room for more fds than any sender attaches, so a
            // truncation means the kernel could not install the fds: EMFILE.
            self.fds_dropped += 1;
        }
        Ok(Some(Received {
            bytes: buf[..msg.bytes.min(buf.len())].to_vec(),
            truncated,
            fds,
            uid: cred.map(|c| c.uid.as_raw()),
            pid: cred.map(|c| c.pid.as_raw_nonzero().get() as u32),
        }))
    }

    /// Authenticate a datagram and file it under its rendezvous.
    fn route(
        &mut self,
        round: &Round<'_>,
        raw: Received,
        received: &mut [Option<SharedHandle>],
    ) -> Result<()> {
        let pid = raw.pid;
        match self.authenticate(round, raw) {
            Ok((message, handle)) => {
                let early = Early {
                    sender: message.sender as usize,
                    pid,
                    world: message.world as usize,
                    size: message.size,
                    handle,
                };
                if message.group == round.group && message.seq == round.seq {
                    self.accept(round, early, received)
                } else if message.group == round.group && message.seq > round.seq {
                    self.early
                        .entry((message.group, message.seq))
                        .or_default()
                        .push(early);
                    Ok(())
                } else {
                    // A late message of a finished or failed rendezvous: its fd closes here.
                    tracing::debug!(seq = message.seq, "dropping stale handle");
                    Ok(())
                }
            }
            Err(reason) => {
                self.rejected += 1;
                tracing::warn!("symmwin rank {}: rejected a message: {reason}", round.rank);
                Ok(())
            }
        }
    }

    fn authenticate(
        &self,
        round: &Round<'_>,
        mut raw: Received,
    ) -> std::result::Result<(Message, SharedHandle), String> {
        if raw.truncated {
            return Err("truncated datagram".into());
        }
        let uid = raw.uid.ok_or("no sender credentials")?;
        if uid != self.uid {
            return Err(format!("sender uid {uid} is not ours ({})", self.uid));
        }
        let message = Message::decode(&raw.bytes).map_err(|e| format!("undecodable: {e}"))?;
        if !self.token.matches(&message.token) {
            return Err(format!("wrong token from pid {:?}", raw.pid));
        }
        let sender = message.sender as usize;
        // A rank is one process for the whole life of its group, so the pid its
        // current request names is the only one that may send for this or a later
        // rendezvous (a token holder that is not a rank cannot plant an early handle).
        if message.group == round.group && message.seq >= round.seq {
            let expected = round
                .peers
                .get(sender)
                .filter(|_| round.targets.contains(&sender))
                .ok_or_else(|| format!("sender rank {sender} is not a peer"))?;
            if raw.pid != Some(expected.pid) {
                return Err(format!(
                    "rank {sender} message from pid {:?}, its request names pid {}",
                    raw.pid, expected.pid
                ));
            }
        }
        let handle = match message.payload {
            Payload::Fd if raw.fds.len() == 1 => SharedHandle::Fd(raw.fds.remove(0)),
            Payload::Fabric(bytes) if raw.fds.is_empty() => SharedHandle::Fabric(bytes),
            _ => {
                return Err(format!(
                    "{} fds attached to a {:?} message",
                    raw.fds.len(),
                    message.payload
                ))
            }
        };
        Ok((message, handle))
    }

    fn accept(
        &mut self,
        round: &Round<'_>,
        early: Early,
        received: &mut [Option<SharedHandle>],
    ) -> Result<()> {
        let sender = early.sender;
        let expected = round.peers.get(sender).map(|p| p.pid);
        if sender == round.rank || expected.is_none() || early.pid != expected {
            self.rejected += 1;
            tracing::warn!(
                "symmwin rank {}: rejected an early handle for rank {sender} from pid {:?}; \
                 its request names pid {:?}",
                round.rank,
                early.pid,
                expected
            );
            return Ok(());
        }
        if early.world != round.peers.len() || early.size != round.size {
            return Err(Error::new(
                Phase::Exchange,
                ErrorKind::Mismatch {
                    field: "handle",
                    detail: format!(
                        "rank {sender} sent size {} at world {}, expected size {} at world {}",
                        early.size,
                        early.world,
                        round.size,
                        round.peers.len()
                    ),
                },
            )
            .with_peer(sender));
        }
        match received.get_mut(sender) {
            Some(slot @ None) if round.targets.contains(&sender) => {
                *slot = Some(early.handle);
                self.counts.accepted += 1;
                Ok(())
            }
            _ => {
                self.rejected += 1;
                tracing::warn!(
                    "symmwin rank {}: duplicate handle from rank {sender}",
                    round.rank
                );
                Ok(())
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        own_sockets().retain(|p| p != &self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Socket paths this process has bound and not yet removed.
fn own_sockets() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static OWN: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    OWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Remove the socket files of every endpoint of this process, for process exit:
/// groups and windows kept alive until then (by statics, or by objects an
/// interpreter never destroys) would otherwise leave them behind. Endpoints stay
/// usable locally; no peer can reach them afterwards. The number removed.
pub fn remove_own_sockets() -> usize {
    let paths: Vec<PathBuf> = own_sockets().drain(..).collect();
    paths
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

#[derive(Debug)]
struct Received {
    bytes: Vec<u8>,
    truncated: bool,
    fds: Vec<OwnedFd>,
    uid: Option<u32>,
    pid: Option<u32>,
}

/// Of the peers a send failed for, the one most likely to be the cause. After a death
/// the first survivors to notice fail and leave, so later ones find several peers
/// unreachable: prefer a peer whose socket is still there (died without cleaning up),
/// then one whose process is gone, over one that removed its socket and lives on
/// (gave up after its own error). The others are listed in the message.
fn most_likely_lost(round: &Round<'_>, mut lost: Vec<(usize, Error)>) -> Error {
    let score = |peer: usize| {
        let address = &round.peers[peer];
        let alive = rustix::process::Pid::from_raw(address.pid as i32)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        2 * u8::from(address.socket.exists()) + u8::from(!alive)
    };
    let scores: Vec<u8> = lost.iter().map(|(peer, _)| score(*peer)).collect();
    let best = (0..lost.len())
        .max_by_key(|&i| (scores[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    let (_, mut error) = lost.swap_remove(best);
    if !lost.is_empty() {
        let mut others: Vec<usize> = lost.iter().map(|(peer, _)| *peer).collect();
        others.sort_unstable();
        if let ErrorKind::PeerLost(message) = error.kind_mut() {
            message.push_str(&format!(" (also unreachable: rank(s) {others:?})"));
        }
    }
    error
}

/// A path from a peer's request, bounded for an error message.
fn shown(path: &Path) -> String {
    crate::text::clip(&path.display().to_string())
}

/// Longest path a Unix socket address holds (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A peer socket must be a socket owned by `uid` inside a directory that only `uid`
/// can enter.
fn check_peer_socket(path: &Path, uid: u32) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let refuse = |why: &str| {
        Error::new(
            Phase::Exchange,
            ErrorKind::Rejected(format!("peer socket {}: {why}", shown(path))),
        )
    };
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(refuse(&format!(
            "the path is {len} bytes, longer than a Unix socket address holds \
             ({MAX_SOCKET_PATH}); the peer's request is corrupt or forged"
        )));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        Error::new(
            Phase::Exchange,
            ErrorKind::PeerLost(format!("socket {} is gone ({e})", shown(path))),
        )
    })?;
    if !meta.file_type().is_socket() || meta.uid() != uid {
        return Err(refuse("is not a socket owned by us"));
    }
    let dir = path.parent().ok_or_else(|| refuse("has no directory"))?;
    let dir_meta = std::fs::symlink_metadata(dir).map_err(|_| refuse("directory is unreadable"))?;
    if !dir_meta.is_dir() || dir_meta.uid() != uid || dir_meta.mode() & 0o077 != 0 {
        return Err(refuse("is not in a private directory of ours"));
    }
    Ok(())
}

/// Sockets left by killed processes would only confuse a reader of the directory;
/// remove those whose owning pid (the name's first field) is gone. Once per process.
fn remove_stale_sockets(dir: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| sweep_dead_sockets(dir));
}

/// The pid in a socket name this module makes (`<pid>-<16 hex>-<16 hex>.sock`).
fn socket_name_pid(name: &str) -> Option<i32> {
    let stem = name.strip_suffix(".sock")?;
    let mut parts = stem.split('-');
    let pid = parts.next()?;
    let hex16 = |p: Option<&str>| {
        p.is_some_and(|p| p.len() == 16 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !hex16(parts.next()) || !hex16(parts.next()) || parts.next().is_some() {
        return None;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Remove the sockets in `dir` named as ours whose pid is gone. Anything that is not
/// a socket (a file, a symlink) is left alone whatever its name.
fn sweep_dead_sockets(dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(socket_name_pid) else {
            continue;
        };
        // `DirEntry::file_type` does not follow symlinks.
        if !entry.file_type().is_ok_and(|t| t.is_socket()) {
            continue;
        }
        let alive = rustix::process::Pid::from_raw(pid)
            .map(|p| rustix::process::test_kill_process(p).is_ok())
            .unwrap_or(false);
        if !alive {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_deletes_only_dead_sockets_it_named() {
        let dir = std::env::temp_dir().join(format!("symmwin-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // No process has a pid above the kernel's largest pid_max (2^22).
        let dead = format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 7, 1, 2);
        let socket = dir.join(&dead);
        let _bound = std::os::unix::net::UnixDatagram::bind(&socket).unwrap();
        let file = dir.join(format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 8, 1, 2));
        std::fs::write(&file, b"a user's file").unwrap();
        let link = dir.join(format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 9, 1, 2));
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let odd = dir.join(format!("{}-x.sock", (1 << 22) + 10));
        let _odd_bound = std::os::unix::net::UnixDatagram::bind(&odd).unwrap();
        sweep_dead_sockets(&dir);
        assert!(!socket.exists(), "the dead rank's socket goes");
        assert!(file.exists(), "a regular file stays");
        assert!(std::fs::symlink_metadata(&link).is_ok(), "a symlink stays");
        assert!(odd.exists(), "a socket named otherwise stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_overlong_peer_socket_path_is_named_as_such() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(1 << 20)));
        let err = check_peer_socket(&long, 0).unwrap_err().to_string();
        assert!(
            err.contains("longer than a Unix socket address holds"),
            "{err}"
        );
        assert!(err.len() < 1000, "{} bytes", err.len());
    }
}
