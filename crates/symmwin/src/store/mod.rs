//! A small key-value store for rendezvous metadata.
//!
//! Rendezvous needs only four operations; anything that can do them (a directory,
//! a map in memory, torch's c10d Store through callbacks) can carry a job.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Phase, Result};

mod counted;
pub(crate) mod deadline;
mod file;
mod memory;

pub(crate) use counted::Counted;
pub use file::FileStore;
pub use memory::MemoryStore;

/// Key-value store shared by every rank of a group.
pub trait Store: Send + Sync {
    /// Set `key` to `value`, replacing any previous value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, or `None` when it is not set (never blocks).
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Atomically add `delta` to the integer at `key` (missing = 0); the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
    /// Remove `key`; removing a missing key is not an error.
    fn delete(&self, key: &str) -> Result<()>;
    /// Who serves the store or where its keys live, for error messages (e.g.
    /// "TCPStore at host:29500", "store /dev/shm/job-1").
    fn describe(&self) -> Option<String> {
        None
    }
    /// The group that uses this store is gone: let go of the connection now, even
    /// while windows made through it live on. Later calls may fail.
    fn release(&self) {}
    /// Wait up to `timeout` for every key in `keys`: their values in order, `None` for
    /// a key still missing at the deadline. The default polls [`Store::try_get`]
    /// ([`poll_all`]); a store that can wait on several keys in one round trip (c10d's
    /// `wait` + `multiGet`) overrides it, so a gather costs O(1) round trips per rank.
    fn wait_all(&self, keys: &[String], timeout: Duration) -> Result<Vec<Option<Vec<u8>>>> {
        poll_all(self, keys, timeout)
    }
}

/// Wait for every key in `keys` except `own.0`, whose value the caller already has
/// (`own.1`), returning the values in order. On timeout the error lists the indices
/// (ranks) whose keys never appeared. A store call that blocks is not interrupted
/// here; the rendezvous bounds its own store calls by its deadline (the
/// crate-private `store::deadline`).
pub fn gather(
    store: &dyn Store,
    keys: &[String],
    own: (usize, &[u8]),
    timeout: Duration,
) -> Result<Vec<Vec<u8>>> {
    let start = Instant::now();
    let wanted: Vec<String> = keys
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != own.0)
        .map(|(_, key)| key.clone())
        .collect();
    let mut found = store
        .wait_all(&wanted, timeout)
        .map_err(|e| e.during(Phase::Gather))?
        .into_iter();
    let values: Vec<Option<Vec<u8>>> = (0..keys.len())
        .map(|i| {
            if i == own.0 {
                Some(own.1.to_vec())
            } else {
                found.next().flatten()
            }
        })
        .collect();
    if values.iter().all(Option::is_some) {
        return Ok(values.into_iter().flatten().collect());
    }
    let missing = values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_none())
        .map(|(i, _)| i)
        .collect();
    Err(Error::new(
        Phase::Gather,
        ErrorKind::Timeout {
            missing,
            waited: start.elapsed(),
        },
    ))
}

/// [`Store::wait_all`] by polling [`Store::try_get`]: one lookup per missing key per
/// round, with a pause that starts short and doubles up to a cap.
pub fn poll_all<S: Store + ?Sized>(
    store: &S,
    keys: &[String],
    timeout: Duration,
) -> Result<Vec<Option<Vec<u8>>>> {
    let start = Instant::now();
    let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
    // Peers usually arrive within a millisecond; a short poll keeps that off the
    // critical path, the cap keeps a long wait cheap.
    let mut pause = Duration::from_micros(10);
    loop {
        for (value, key) in values.iter_mut().zip(keys) {
            if value.is_none() {
                *value = store.try_get(key)?;
            }
        }
        if values.iter().all(Option::is_some) || start.elapsed() >= timeout {
            return Ok(values);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_micros(500));
    }
}

/// How long past its deadline a bounded gather may take to report its own timeout
/// (which names the missing ranks) before the store counts as unreachable.
const GATHER_GRACE: Duration = Duration::from_millis(50);

/// [`gather`] that returns by `deadline` (plus a little) even if a store call blocks,
/// calling `look` while it waits (at least every 50 ms): its error ends the wait.
pub(crate) fn gather_by(
    store: &std::sync::Arc<dyn Store>,
    keys: Vec<String>,
    own: (usize, Vec<u8>),
    (deadline, mut look): (Instant, impl FnMut() -> Result<()>),
) -> Result<Vec<Vec<u8>>> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    let what = format!("reading {} request key(s) such as {}", keys.len(), keys[0]);
    let mut waiting = crate::waiting::Waiting::new(Phase::Gather, own.0, timeout);
    let reading = format!("{what} from the store");
    deadline::call_ticking(
        store,
        (deadline + GATHER_GRACE, Phase::Gather),
        move || what,
        move |s| gather(s, &keys, (own.0, &own.1), timeout),
        || {
            waiting.tick(|| reading.clone())?;
            look()
        },
    )
}

/// Keys of one group: every key starts with `symmwin/<group>/`.
#[derive(Debug, Clone)]
pub struct Namespace {
    prefix: String,
}

impl Namespace {
    /// The namespace of group `group`.
    pub fn new(group: &str) -> Self {
        Namespace {
            prefix: format!("symmwin/{group}/"),
        }
    }

    /// The key for `rank`'s request of rendezvous number `seq`.
    pub fn request(&self, seq: u64, rank: usize) -> String {
        format!("{}{seq}/req/{rank}", self.prefix)
    }

    /// Where a second process claiming `rank` in rendezvous `seq` leaves its pid.
    pub fn duplicate(&self, seq: u64, rank: usize) -> String {
        format!("{}{seq}/dup/{rank}", self.prefix)
    }
}
