//! A small key-value store for rendezvous metadata.
//!
//! Rendezvous needs only four operations; anything that can do them (a directory,
//! a map in memory, torch's c10d Store through callbacks) can carry a job.

use std::time::{Duration, Instant};

use symmwin_device::error::{Error, ErrorKind, Phase, Result};

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

/// How long one store wait of a gather lasts before the gather looks at which ranks
/// are still missing ([`GatherLooks::between`]): short enough that a rank found to
/// have left between two looks is named within a second, long enough that a rank
/// waiting for a late peer costs the store a few calls a second. A gather whose peers
/// are all there returns from its first wait, whatever this is.
const GATHER_SLICE: Duration = Duration::from_millis(400);

/// The first look comes sooner: a rank that left just before it is then still judged
/// by what it did during this call.
const FIRST_SLICE: Duration = Duration::from_millis(100);

/// What a gather asks of its caller while it waits (see [`gather_by`]).
pub(crate) trait GatherLooks {
    /// Called at least every 50 ms while a store wait runs, with the ranks missing at
    /// the last look (every other rank before the first): an error ends the gather.
    fn tick(&mut self, missing: &[usize]) -> Result<()>;
    /// Called between two store waits with the ranks still missing, by `deadline`:
    /// an error ends the gather.
    fn between(&mut self, missing: &[usize], deadline: Instant) -> Result<()>;
    /// What the gather waits for, for its progress line ("for rank(s) [2] to ...").
    fn describe(&self, missing: &[usize]) -> String;
}

/// Wait until `deadline` for every key in `keys` except `own.0`, whose value the
/// caller already has (`own.1`): the values in order. On timeout the error lists the
/// indices (ranks) whose keys never appeared. The wait runs in slices of the store's
/// own [`Store::wait_all`] on a worker (see `deadline`), so it returns by the deadline
/// (plus a little) even if a store call blocks; `looks` is asked in between and
/// while each slice runs.
pub(crate) fn gather_by(
    store: &std::sync::Arc<dyn Store>,
    keys: Vec<String>,
    own: (usize, Vec<u8>),
    deadline: Instant,
    looks: &mut impl GatherLooks,
) -> Result<Vec<Vec<u8>>> {
    let start = Instant::now();
    let timeout = deadline.saturating_duration_since(start);
    let mut waiting = symmwin_device::waiting::Waiting::new(Phase::Gather, own.0, timeout);
    let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
    values[own.0] = Some(own.1);
    let mut first = true;
    let mut answered = false;
    loop {
        let missing: Vec<usize> = (0..keys.len()).filter(|&r| values[r].is_none()).collect();
        if missing.is_empty() {
            return Ok(values.into_iter().flatten().collect());
        }
        let now = Instant::now();
        if now >= deadline && !first {
            return Err(timed_out(missing, start));
        }
        if !first {
            looks.between(&missing, deadline)?;
        }
        let slice = if first { FIRST_SLICE } else { GATHER_SLICE };
        first = false;
        let wanted: Vec<String> = missing.iter().map(|&r| keys[r].clone()).collect();
        let slice = deadline.saturating_duration_since(now).min(slice);
        let what = format!(
            "reading {} request key(s) such as {}",
            wanted.len(),
            wanted[0]
        );
        let found = deadline::call_ticking(
            store,
            (deadline + GATHER_GRACE, Phase::Gather),
            move || what,
            move |s| {
                s.wait_all(&wanted, slice)
                    .map_err(|e| e.during(Phase::Gather))
            },
            || {
                waiting.tick(|| looks.describe(&missing))?;
                looks.tick(&missing)
            },
        );
        let found = match found {
            // A store that answered earlier slices and is late with the last one, on a
            // loaded machine, is not unreachable: the ranks are what never came.
            Err(e) if answered && Instant::now() >= deadline && is_store(&e) => {
                return Err(timed_out(missing, start));
            }
            other => other?,
        };
        answered = true;
        for (&rank, value) in missing.iter().zip(found) {
            values[rank] = value;
        }
    }
}

/// The gather's timeout: `missing` never published, waited since `start`.
fn timed_out(missing: Vec<usize>, start: Instant) -> Error {
    Error::new(
        Phase::Gather,
        ErrorKind::Timeout {
            missing,
            waited: start.elapsed(),
        },
    )
}

fn is_store(error: &Error) -> bool {
    matches!(error.kind(), ErrorKind::Store(_))
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

    /// Where `rank` says it has started the group's first rendezvous (see
    /// `rendezvous::join`).
    pub fn join(&self, rank: usize) -> String {
        format!("{}join/{rank}", self.prefix)
    }

    /// Where a second process claiming `rank` in rendezvous `seq` leaves its pid.
    pub fn duplicate(&self, seq: u64, rank: usize) -> String {
        format!("{}{seq}/dup/{rank}", self.prefix)
    }
}
