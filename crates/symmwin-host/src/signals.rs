//! Signals on host memory: the pads are plain shared memory, so CPU atomics suffice.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::poison_marks;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{PadLayout, PadSignal, SignalAt, Signals};

/// Signals on host memory: the pads are plain shared memory, so CPU atomics suffice.
#[derive(Debug, Default)]
pub struct HostSignals;

/// The word for (`channel`, `src`) in `owner`'s pad, borrowed no longer than `pads`
/// (one signal call, during which the window calling us keeps its pads mapped).
fn pad_word(pads: &PadLayout, owner: usize, channel: usize, src: usize) -> Result<&AtomicU32> {
    let addr = pads.word(owner, channel, src)?;
    // SAFETY: the address lies inside a mapped pad (bounds checked by `word`) that
    // lives as long as the window calling us, which outlives this call and so the
    // borrow of `pads`; u32 words are 4-byte aligned; all access to pads goes through
    // atomics.
    Ok(unsafe { AtomicU32::from_ptr(addr as *mut u32) })
}

fn spin_until(
    word: &AtomicU32,
    from: u32,
    to: u32,
    order: Ordering,
    wait: HostWait,
) -> Result<bool> {
    wait_until(wait, || {
        word.compare_exchange_weak(from, to, order, Ordering::Relaxed)
            .is_ok()
    })
}

/// What a host wait waits for: until when, for which peer, and whose deaths it sees.
#[derive(Debug, Clone, Copy)]
pub struct HostWait {
    pub deadline: Instant,
    pub peer: usize,
    pub peers: symmwin_device::peer_watch::PeerSet,
    /// The waiting rank, and what it waits in ("a barrier on channel 0").
    pub waiter: (usize, &'static str),
    /// This rank's poison mark of the pads waited on, if they have one: a wait sees
    /// the window poisoned by another rank within one look.
    pub mark: Option<usize>,
}

/// Spin (yielding, then sleeping) until `done` or the deadline: `Ok(false)` on timeout,
/// an error naming the peer once it has ended without `done`, and
/// [`ErrorKind::Poisoned`] once another rank poisoned the window waited on. Ranks may
/// outnumber cores, so the wait gives the peer it waits for a chance to run. The death
/// mark is read before `done` is looked at once more, so a peer that did its part and
/// then ended fails nothing.
pub fn wait_until(wait: HostWait, mut done: impl FnMut() -> bool) -> Result<bool> {
    let mut spins = 0u32;
    let mut next_look = Instant::now() + symmwin_device::waiting::LOOK_EVERY;
    let timeout = wait.deadline.saturating_duration_since(Instant::now());
    let mut waiting = symmwin_device::waiting::Waiting::new(Phase::Signal, wait.waiter.0, timeout);
    while !done() {
        spins += 1;
        if spins % 64 == 0 {
            let now = Instant::now();
            if now >= next_look {
                poisoned_at(wait.mark)?;
                if let Some(gone) = wait.peers.exit_error(Phase::Signal, wait.peer) {
                    return if done() { Ok(true) } else { Err(gone) };
                }
                waiting.tick(|| format!("for rank {} in {}", wait.peer, wait.waiter.1))?;
                next_look = now + symmwin_device::waiting::LOOK_EVERY;
            }
            if now >= wait.deadline {
                return Ok(false);
            }
            if spins < 4096 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(true)
}

/// Fail when the mark at `mark` holds a poison record.
fn poisoned_at(mark: Option<usize>) -> Result<()> {
    let Some(addr) = mark else { return Ok(()) };
    // SAFETY: a wait's mark is this rank's own mark of the pads it waits on, mapped
    // for as long as the window whose call waits.
    match unsafe { poison_marks::read_at(addr) } {
        None => Ok(()),
        Some(poison) => Err(poison_marks::refused(poison)),
    }
}

/// A wait for `peer` that gave up after `timeout`.
pub fn timed_out(peer: usize, timeout: Duration) -> Error {
    Error::new(
        Phase::Signal,
        ErrorKind::Timeout {
            missing: vec![peer],
            waited: timeout,
        },
    )
    .with_peer(peer)
}

impl Signals for HostSignals {
    fn signal(&self, pads: &PadLayout, op: PadSignal, at: SignalAt) -> Result<()> {
        let SignalAt {
            channel, timeout, ..
        } = at;
        let deadline = Instant::now() + timeout;
        // Each flip is followed by a look at this rank's poison mark: a call whose
        // peers gave up on the window never goes on to pair with a later call.
        let flip = |flip: Flip| {
            flip.run(pads, channel, (deadline, at.peers), timeout)?;
            poison_marks::check(pads)
        };
        let peers = || (0..pads.world()).filter(|&p| p != pads.rank());
        match op {
            PadSignal::Barrier => {
                peers().try_for_each(|peer| flip(Flip::Set(peer)))?;
                peers().try_for_each(|peer| flip(Flip::Take(peer)))
            }
            PadSignal::Put(dst) => flip(Flip::Set(dst)),
            PadSignal::Wait(src) => flip(Flip::Take(src)),
        }
    }
}

/// One pad word changed by this rank: its slot in a peer's pad set (CAS 0 -> 1 with
/// release), or the peer's slot in its own pad taken (CAS 1 -> 0 with acquire).
#[derive(Clone, Copy)]
enum Flip {
    Set(usize),
    Take(usize),
}

impl Flip {
    /// Flip the word by `deadline`, or time out naming the peer.
    fn run(
        self,
        pads: &PadLayout,
        channel: usize,
        until: (Instant, symmwin_device::peer_watch::PeerSet),
        timeout: Duration,
    ) -> Result<()> {
        let me = pads.rank();
        let (peer, owner, src, from, ordering) = match self {
            Flip::Set(dst) => (dst, dst, me, 0, Ordering::Release),
            Flip::Take(src) => (src, me, src, 1, Ordering::Acquire),
        };
        pads.check_peer(peer)?;
        let word = pad_word(pads, owner, channel, src)?;
        let (deadline, peers) = until;
        let wait = HostWait {
            deadline,
            peer,
            peers,
            waiter: (me, "a host signal wait"),
            mark: pads.mark(me),
        };
        if spin_until(word, from, 1 - from, ordering, wait)? {
            Ok(())
        } else {
            Err(timed_out(peer, timeout))
        }
    }
}
