//! All-gather of shareable handles over Unix datagram sockets, with each rank's word
//! on freed windows and (once a group's ranks know each other's sockets) its request.
//!
//! Each rank binds one socket per group in a private directory. A message carries
//! the sender's rank, the rendezvous id (group id and sequence) and the receiver's
//! token, which the sender can only know by reading the receiver's request from the
//! store. The kernel attaches the sender's pid and uid (`SO_PASSCRED`), so a message
//! is accepted only from the process that published that rank's request, under our
//! uid, with the right token. Everything else is dropped (its fds closed) and logged.

mod auth;
mod diagnosis;
mod early;
mod give_up;
mod held;
mod sweep;
mod traded;
mod transport;
pub mod wire;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::token::Token;
use early::Early;
pub use give_up::GaveUp;
pub use sweep::{remove_own_sockets, remove_sockets_of};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::SharedHandle;
use traded::Sent;
pub use traded::{Awaited, Outgoing, Traded};
pub use wire::Offer;

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
    /// Physical size of the memory every handle refers to (the size asked for,
    /// rounded up to the granularity): what the importer maps.
    pub physical_size: u64,
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
    /// The first give-up notice a peer sent: the group is out of step from there on.
    gave_up: Option<GaveUp>,
    /// Messages dropped since creation (for tests and diagnostics).
    rejected: u64,
    /// Datagrams whose attached fds the kernel dropped (`MSG_CTRUNC`) since creation:
    /// this process was at its open-file limit when they arrived.
    fds_dropped: u64,
    /// Traffic since creation: messages sent, handles accepted.
    counts: ExchangeCounts,
    /// Where datagrams are received (kept between receives).
    receive_buffer: Vec<u8>,
    /// Datagrams received during a gather, before their senders could be checked.
    held: Vec<transport::Received>,
    /// The call whose gather held datagrams, and `fds_dropped` when it began.
    gather_began: Option<(u64, u64)>,
}

/// What an endpoint has sent and accepted since it was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeCounts {
    /// Datagrams sent (one per peer per rendezvous; two to a peer that needs a
    /// handle after our first message offered a freed window and carried none).
    pub sent: u64,
    /// Handles accepted (one per peer per rendezvous); each fd is closed after import.
    pub accepted: u64,
}

impl Endpoint {
    /// Bind a new socket with a fresh token in the private directory `dir`.
    pub fn bind(dir: &Path, label: u64) -> Result<Self> {
        crate::private_dir::ensure(dir, "socket directory", "the sockets", Phase::Exchange)?;
        sweep::remove_stale_sockets(dir);
        let token = Token::random()?;
        let path = dir.join(format!(
            "{}-{label:016x}-{:016x}.sock",
            std::process::id(),
            crate::token::random_u64()
        ));
        let socket = transport::bind_socket(&path)?;
        Ok(Endpoint {
            socket,
            path,
            token,
            uid: rustix::process::getuid().as_raw(),
            early: HashMap::new(),
            gave_up: None,
            rejected: 0,
            fds_dropped: 0,
            counts: ExchangeCounts::default(),
            receive_buffer: Vec::new(),
            held: Vec::new(),
            gather_began: None,
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
        let mut traded = Traded::new(round.peers.len());
        let ours = Outgoing {
            offer: Offer::default(),
            handle: Some(handle),
            request: None,
        };
        self.trade(round, &mut traded, &ours, Awaited::Handles, timeout)?;
        Ok(traded.handles)
    }

    /// Send our offer (with our handle and our request, where `ours` has them) to
    /// every target that has not had it yet, and receive until every target's
    /// `awaited` part has come, in any order. Called again for the same rendezvous
    /// with a handle, it sends only the handle that is new and keeps what came before.
    pub fn trade(
        &mut self,
        round: &Round<'_>,
        traded: &mut Traded,
        ours: &Outgoing<'_>,
        awaited: Awaited,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let fds_dropped_before = self.fds_dropped_baseline(round.seq);
        self.take_what_came_early(round, traded)?;
        let mut waiting =
            symmwin_device::waiting::Waiting::new(Phase::Exchange, round.rank, timeout);
        let needed = if ours.handle.is_some() {
            Sent::Handle
        } else {
            Sent::OfferOnly
        };
        loop {
            let (full, lost) = self.send_pending(round, traded, ours, needed);
            if !lost.is_empty() {
                // A peer that gave this call up told us before it closed its socket:
                // its notice, naming whom it blamed, is queued and says more.
                self.receive_queued(round, traded)?;
                return Err(exited_or_lost(round, lost));
            }
            let missing = traded.missing(round.targets, awaited);
            if missing.is_empty() && full.is_empty() {
                // A peer's message for this call may have come before the call began
                // (see `early`) and its notice that it gave the call up after: that
                // notice is read before the call can say ok.
                return self.receive_queued(round, traded);
            }
            let now = Instant::now();
            if now >= deadline {
                let mut waiting = missing;
                waiting.extend(&full);
                let fds_dropped = self.fds_dropped - fds_dropped_before;
                return Err(timed_out(waiting, fds_dropped, timeout));
            }
            waiting.tick(|| {
                let peers = symmwin_device::text::ranks(&missing);
                format!(
                    "for rank(s) {peers} in the socket trade of rendezvous {}",
                    round.seq
                )
            })?;
            // Death marks are read before the queue: a peer that sent its part and then
            // exited is marked only after its message was queued, so it is read first.
            let waited_for = missing
                .iter()
                .chain(&full)
                .map(|&r| (r, round.peers[r].pid));
            let exited = symmwin_device::peer_watch::first_exited(Phase::Exchange, waited_for);
            // While sends are pending, poll briefly so they are retried soon; otherwise
            // wake often enough to see a peer's death mark within a second.
            let wait = match (&exited, full.is_empty()) {
                (Some(_), _) => Duration::ZERO,
                (None, true) => symmwin_device::waiting::LOOK_EVERY.min(deadline - now),
                (None, false) => Duration::from_millis(1).min(deadline - now),
            };
            if self.wait_readable(wait)? {
                self.receive_queued(round, traded)?;
            }
            if let Some(exited) =
                exited.filter(|e| e.peer().is_some_and(|r| !traded.has(awaited, r)))
            {
                return Err(match self.fds_dropped > fds_dropped_before {
                    true => timed_out(missing, self.fds_dropped - fds_dropped_before, timeout),
                    false => exited,
                });
            }
        }
    }

    /// Before a trade: drop what was queued for calls below this one (it can never be
    /// used: its fds close), fail at once when a peer gave this call up, and take what
    /// came for this call before it started.
    fn take_what_came_early(&mut self, round: &Round<'_>, traded: &mut Traded) -> Result<()> {
        self.early
            .retain(|&(group, seq), _| group != round.group || seq >= round.seq);
        if let Some(heard) = self.gave_up {
            return Err(heard.error(round.rank));
        }
        for early in self
            .early
            .remove(&(round.group, round.seq))
            .unwrap_or_default()
        {
            self.accept(round, early, traded)?;
        }
        self.route_held(round, traded)
    }

    /// Send `ours` to every target that has not had the `needed` part yet. Returns the
    /// targets whose queue was full (to retry) and those whose send failed.
    fn send_pending(
        &mut self,
        round: &Round<'_>,
        traded: &mut Traded,
        ours: &Outgoing<'_>,
        needed: Sent,
    ) -> (Vec<usize>, Vec<(usize, Error)>) {
        let mut full = Vec::new();
        let mut lost = Vec::new();
        for &peer in round.targets {
            if traded.sent[peer] >= needed {
                continue;
            }
            let first = traded.sent[peer] == Sent::Nothing;
            match self.try_send(round, peer, ours, first) {
                Ok(true) => {
                    traded.sent[peer] = needed;
                    self.counts.sent += 1;
                }
                Ok(false) => full.push(peer),
                Err(e) => lost.push((peer, e)),
            }
        }
        (full, lost)
    }

    /// Route every datagram waiting in our queue.
    fn receive_queued(&mut self, round: &Round<'_>, traded: &mut Traded) -> Result<()> {
        while let Some(msg) = self.receive_one()? {
            self.route(round, msg, traded)?;
        }
        Ok(())
    }
}

/// The error of sends that failed because `lost` peers no longer listen: a peer that
/// exited removed its socket a moment before the watcher marks it, so the mark is
/// given a moment to say how it ended before the socket's word is taken.
fn exited_or_lost(round: &Round<'_>, lost: Vec<(usize, Error)>) -> Error {
    let until = Instant::now() + EXIT_MARK_GRACE;
    loop {
        let peers = lost.iter().map(|(r, _)| (*r, round.peers[*r].pid));
        if let Some(exited) = symmwin_device::peer_watch::first_exited(Phase::Exchange, peers) {
            return exited;
        }
        if Instant::now() >= until {
            return diagnosis::most_likely_lost(round, lost);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long a failed send waits for the watcher's word on a peer that stopped listening.
const EXIT_MARK_GRACE: Duration = Duration::from_millis(200);

/// The error of an exchange that timed out waiting for the peers in `waiting`: the
/// open-file limit when the kernel dropped fds meanwhile (`fds_dropped` datagrams).
fn timed_out(mut waiting: Vec<usize>, fds_dropped: u64, timeout: Duration) -> Error {
    waiting.sort_unstable();
    waiting.dedup();
    if fds_dropped > 0 {
        return symmwin_device::limits::fd_limit_error(fds_dropped, &waiting);
    }
    Error::new(
        Phase::Exchange,
        ErrorKind::Timeout {
            missing: waiting,
            waited: timeout,
        },
    )
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        sweep::own_sockets().retain(|p| p != &self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}
