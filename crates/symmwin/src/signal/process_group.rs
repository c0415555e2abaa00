//! How messages to unmapped peers travel through a process group: the policy half of
//! [`RemotePeers`], over a [`ProcessGroupLink`] that only posts and waits.
//!
//! The adapter (torch's c10d ProcessGroup in the torch adapter) supplies the link: post
//! a batch of sends and receives, wait for one posted work within a bound, report
//! success or failure. Everything else is decided here:
//!
//! - Host memory: a host send completes only when the peer receives (gloo), so a flag
//!   send is handed to a completer thread of its peer, which waits for it and keeps a
//!   failure for the next call; receives (and data sends) are waited for in the call,
//!   up to its deadline. A peer that does not receive holds up no other peer's sends.
//! - Device memory through a group that moves device memory itself (NCCL): the batch
//!   is posted as one group, ordered on the caller's stream; the stream waits for it
//!   when it receives or sends data the caller will reuse.
//! - Device memory through a group that does not (gloo only): every message is staged
//!   through host memory after the stream has drained, and the host path runs.
//!
//! A failed wait is a timeout only when it failed at its deadline: gloo reports a
//! timeout and a lost connection with the same exception type (so the link cannot
//! tell them apart by type), while a wait that failed sooner did not run out of time.
//! The waits of one call run side by side, so one that times out cannot make the
//! others fail early (gloo closes every connection after a timeout).

use std::collections::HashMap;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symmwin_device::lock::Recover;

use super::remote::{Direction, Flag, RemoteFailure, RemotePeers, Transfer};
use symmwin_device::provider::StreamHandle;

/// Where the bytes of a posted batch are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageMemory {
    /// Host memory: every message gets its own work, waited for one by one.
    Host,
    /// Device memory: the batch goes as one group, ordered on the current stream;
    /// only the last work (the group's) is returned.
    Device,
}

/// One message of a batch the link posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Group rank of the peer.
    pub peer: usize,
    /// Send or receive.
    pub direction: Direction,
    /// Message tag, the same on both sides.
    pub tag: u32,
    /// The bytes (address, length); `None` for a flag, whose 4-byte buffer the link
    /// supplies (zeros) and keeps until the work is released.
    pub bytes: Option<(usize, usize)>,
}

impl Message {
    fn between(peer: usize, direction: Direction, tag: u32, bytes: Option<(usize, usize)>) -> Self {
        Message {
            peer,
            direction,
            tag,
            bytes,
        }
    }
}

/// A failure the link reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFailure {
    /// The peer of the failing message, when known.
    pub peer: Option<usize>,
    /// True when the backend's error type says the connection is gone (a network
    /// error); false when it does not say.
    pub broken: bool,
    /// The backend's own message.
    pub message: String,
}

/// What the adapter provides: post and wait on the group's process group.
pub trait ProcessGroupLink: Send + Sync + 'static {
    /// One posted message (or group of messages); dropping it releases it.
    type Work: Send + 'static;

    /// True when the group moves device memory itself (NCCL); else device messages
    /// are staged through host memory.
    fn moves_device_memory(&self) -> bool;

    /// Post `batch`; one entry per message: its work, or `None` where the work is
    /// a later message's (a device group returns only the last).
    fn post(
        &self,
        batch: &[Message],
        memory: MessageMemory,
    ) -> Result<Vec<Option<Self::Work>>, LinkFailure>;

    /// Wait for `work`, at most `bound` (`None`: as long as the backend's own
    /// timeout). On device memory, the current stream waits instead.
    fn wait(&self, work: Self::Work, bound: Option<Duration>) -> Result<(), LinkFailure>;

    /// Wait until the work on `stream` so far has completed.
    fn synchronize(&self, stream: StreamHandle) -> Result<(), LinkFailure>;

    /// Copy `len` bytes from `src` to `dst`, device to host or (on the current
    /// stream) host to device.
    fn copy(&self, dst: usize, src: usize, len: usize, to_device: bool) -> Result<(), LinkFailure>;
}

/// A failure of a send that completed after its call, for the next call.
type Deferred = Arc<Mutex<Option<RemoteFailure>>>;

fn failed_wait(message: &str) -> LinkFailure {
    LinkFailure {
        peer: None,
        broken: false,
        message: message.to_owned(),
    }
}

fn lost(f: LinkFailure) -> RemoteFailure {
    RemoteFailure {
        peer: f.peer,
        timed_out: false,
        message: f.message,
        also_waited_for: Vec::new(),
    }
}

/// [`RemotePeers`] over a process group, for the windows of one group on one kind of
/// memory.
pub struct ProcessGroupPeers<L: ProcessGroupLink> {
    link: Arc<L>,
    device: bool,
    staged: bool,
    deferred: Deferred,
    // By peer, made with the first flag sent to it: most groups never have one.
    completers: Mutex<HashMap<usize, Sender<L::Work>>>,
}

impl<L: ProcessGroupLink> ProcessGroupPeers<L> {
    /// Peers reached through `link`, for memory on a device (`device`) or the host.
    pub fn new(link: L, device: bool) -> Self {
        let staged = device && !link.moves_device_memory();
        ProcessGroupPeers {
            link: Arc::new(link),
            device,
            staged,
            deferred: Arc::default(),
            completers: Mutex::default(),
        }
    }

    /// An earlier send that failed, reported once.
    fn take_deferred(&self) -> Result<(), RemoteFailure> {
        match self.deferred.lock().recover().take() {
            None => Ok(()),
            Some(f) => Err(RemoteFailure {
                message: match f.peer {
                    Some(peer) => format!("an earlier signal to rank {peer} failed: {}", f.message),
                    None => format!("an earlier signal failed: {}", f.message),
                },
                ..f
            }),
        }
    }

    /// Hand a flag send to `peer`'s completer thread (started with the first one).
    fn complete_later(&self, peer: usize, work: L::Work) -> Result<(), RemoteFailure> {
        let mut completers = self.completers.lock().recover();
        if let Some(tx) = completers.get(&peer) {
            if let Err(mpsc::SendError(work)) = tx.send(work) {
                // The thread is gone (it can only have panicked): wait here instead.
                return self.link.wait(work, None).map_err(lost);
            }
            return Ok(());
        }
        let (tx, rx) = mpsc::channel::<L::Work>();
        let link = Arc::clone(&self.link);
        let deferred = Arc::clone(&self.deferred);
        // Detached: a send whose peer never receives blocks its wait forever, and the
        // process must still be able to exit. The thread ends once this object (the
        // sender) is gone and its queue is drained.
        std::thread::Builder::new()
            .name(format!("symmwin-send-{peer}"))
            .spawn(move || {
                for work in rx {
                    if let Err(f) = link.wait(work, None) {
                        let mut slot = deferred.lock().recover();
                        if slot.is_none() {
                            *slot = Some(lost(LinkFailure {
                                peer: Some(peer),
                                ..f
                            }));
                        }
                    }
                }
            })
            .map_err(|e| RemoteFailure {
                peer: Some(peer),
                timed_out: false,
                message: format!("cannot start the thread that completes sends: {e}"),
                also_waited_for: Vec::new(),
            })?;
        tx.send(work).map_err(|_| RemoteFailure {
            peer: Some(peer),
            timed_out: false,
            message: "the thread that completes sends ended at once".into(),
            also_waited_for: Vec::new(),
        })?;
        completers.insert(peer, tx);
        Ok(())
    }

    /// Host memory: post everything; receives (and, with `wait_sends`, sends) are
    /// waited for here, flag sends by their peer's completer.
    fn run_host(
        &self,
        batch: &[Message],
        wait_sends: bool,
        timeout: Duration,
    ) -> Result<(), RemoteFailure> {
        let works = self.link.post(batch, MessageMemory::Host).map_err(lost)?;
        let mut waits = Vec::with_capacity(works.len());
        for (m, work) in batch.iter().zip(works) {
            let Some(work) = work else { continue };
            if m.direction == Direction::Send && !wait_sends {
                self.complete_later(m.peer, work)?;
            } else {
                waits.push((m.peer, work));
            }
        }
        self.wait_all(waits, timeout)
    }

    /// Wait for every work at once (each up to the deadline), then report the first
    /// failure, a lost connection before a timeout: a rank that died is named, not a
    /// live rank that was itself waiting for it.
    ///
    /// The waits run side by side because a timeout is told by the clock: gloo closes
    /// every connection once one wait times out, so a wait after it would fail early
    /// and look like a lost peer. Waited together, a peer that is gone fails before
    /// the deadline and the rest fail at it.
    fn wait_all(
        &self,
        waits: Vec<(usize, L::Work)>,
        timeout: Duration,
    ) -> Result<(), RemoteFailure> {
        let started = Instant::now();
        let bound = timeout.max(Duration::from_millis(1));
        let link = &*self.link;
        let wait = |work| {
            let result = link.wait(work, Some(bound));
            (result, started.elapsed())
        };
        let mut waits = waits.into_iter();
        let first = waits.next();
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let others: Vec<_> = waits
                .map(|(peer, work)| (peer, scope.spawn(move || wait(work))))
                .collect();
            let mut outcomes: Vec<_> = first
                .map(|(peer, work)| (peer, wait(work)))
                .into_iter()
                .collect();
            for (peer, handle) in others {
                let outcome = handle.join().unwrap_or_else(|_| {
                    let panicked = failed_wait("the thread waiting for it panicked");
                    (Err(panicked), Duration::ZERO)
                });
                outcomes.push((peer, outcome));
            }
            outcomes
        });
        // A failure in the last tenth of the bound is the deadline's (or a consequence
        // of another wait's timeout at it). The first failure of the most telling kind
        // is reported: a broken connection (the peer's process is gone) before any
        // other early failure (gloo closes a live peer's connections once it fails
        // itself), and both before a timeout.
        let late_after = bound - bound / 10;
        let mut by_kind: [Option<RemoteFailure>; 3] = [None, None, None];
        for (peer, (result, elapsed)) in outcomes {
            let Err(f) = result else { continue };
            let timed_out = !f.broken && elapsed >= late_after;
            let kind = match (f.broken, timed_out) {
                (true, _) => 0,
                (false, false) => 1,
                (false, true) => 2,
            };
            let peer = f.peer.unwrap_or(peer);
            match &mut by_kind[kind] {
                // Every peer a timeout waited for is named: a live one may be late
                // only because it waits for another (stopped) one.
                Some(first) if timed_out => first.also_waited_for.push(peer),
                Some(_) => {}
                slot @ None => {
                    *slot = Some(RemoteFailure {
                        peer: Some(peer),
                        timed_out,
                        message: f.message,
                        also_waited_for: Vec::new(),
                    })
                }
            }
        }
        match by_kind.into_iter().flatten().next() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Device memory the group moves itself: one group on the stream; the stream
    /// waits for it when it receives, or sends data (`wait_sends`).
    fn run_device(&self, batch: &[Message], wait_sends: bool) -> Result<(), RemoteFailure> {
        let works = self.link.post(batch, MessageMemory::Device).map_err(lost)?;
        let receives = batch.iter().any(|m| m.direction == Direction::Recv);
        match works.into_iter().flatten().last() {
            Some(last) if receives || wait_sends => self.link.wait(last, None).map_err(lost),
            _ => Ok(()),
        }
    }

    /// Device data over a group that cannot move it: sends copied to the host (after
    /// the stream's earlier work), the host path, then the receives copied back.
    fn run_staged(
        &self,
        batch: &[Message],
        timeout: Duration,
        stream: StreamHandle,
    ) -> Result<(), RemoteFailure> {
        self.link.synchronize(stream).map_err(lost)?;
        let mut staging: Vec<Vec<u8>> = Vec::with_capacity(batch.len());
        let mut host = Vec::with_capacity(batch.len());
        for m in batch {
            let (ptr, len) = m.bytes.unwrap_or((0, 0));
            let mut buf = vec![0u8; len];
            if m.direction == Direction::Send {
                self.link
                    .copy(buf.as_mut_ptr() as usize, ptr, len, false)
                    .map_err(lost)?;
            }
            host.push(Message {
                bytes: Some((buf.as_mut_ptr() as usize, len)),
                ..*m
            });
            staging.push(buf);
        }
        if let Err(f) = self.run_host(&host, true, timeout) {
            // The process group may still write into a receive that failed: its
            // buffer must outlive that (a group that failed is not used again).
            std::mem::forget(staging);
            return Err(f);
        }
        for (m, buf) in batch.iter().zip(&staging) {
            if let (Direction::Recv, Some((ptr, len))) = (m.direction, m.bytes) {
                self.link
                    .copy(ptr, buf.as_ptr() as usize, len, true)
                    .map_err(lost)?;
            }
        }
        Ok(())
    }

    /// One batch on the path the memory and the group take. Data sends are waited
    /// for (the caller reuses their buffers once the op is complete); flag sends are
    /// not. Staged flags are host messages already: they only wait for the stream.
    fn run(
        &self,
        batch: &[Message],
        data: bool,
        timeout: Duration,
        stream: StreamHandle,
    ) -> Result<(), RemoteFailure> {
        self.take_deferred()?;
        if batch.is_empty() {
            return Ok(());
        }
        match (self.staged, self.device, data) {
            (true, _, true) => self.run_staged(batch, timeout, stream),
            (true, _, false) => {
                self.link.synchronize(stream).map_err(lost)?;
                self.run_host(batch, false, timeout)
            }
            (false, true, _) => self.run_device(batch, data),
            (false, false, _) => self.run_host(batch, data, timeout),
        }
    }
}

impl<L: ProcessGroupLink> RemotePeers for ProcessGroupPeers<L> {
    fn flags(
        &self,
        flags: &[Flag],
        timeout: Duration,
        stream: StreamHandle,
    ) -> Result<(), RemoteFailure> {
        let batch: Vec<Message> = flags
            .iter()
            .map(|f| Message::between(f.peer, f.direction, f.tag, None))
            .collect();
        self.run(&batch, false, timeout, stream)
    }

    fn transfer(
        &self,
        transfers: &[Transfer],
        timeout: Duration,
        stream: StreamHandle,
    ) -> Result<(), RemoteFailure> {
        let batch: Vec<Message> = transfers
            .iter()
            .map(|t| Message::between(t.peer, t.direction, t.tag, Some((t.ptr, t.len))))
            .collect();
        self.run(&batch, true, timeout, stream)
    }
}

#[cfg(test)]
#[path = "process_group_tests.rs"]
mod tests;
