//! A small key-value store for rendezvous metadata.
//!
//! Rendezvous needs only four operations; anything that can do them (a directory,
//! a map in memory, torch's c10d Store through callbacks) can carry a job.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Phase, Result};

mod file;
mod memory;

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
    /// Where the keys live, for error messages ("store /dev/shm/job-1").
    fn describe(&self) -> String {
        "the job's store".to_owned()
    }
}

/// Wait for every key in `keys`, returning the values in order. On timeout the
/// error lists the indices (ranks) whose keys never appeared.
pub fn gather(store: &dyn Store, keys: &[String], timeout: Duration) -> Result<Vec<Vec<u8>>> {
    let start = Instant::now();
    let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
    // Peers usually arrive within a millisecond; a short poll keeps that off the
    // critical path, the cap keeps a long wait cheap.
    let mut pause = Duration::from_micros(10);
    loop {
        for (value, key) in values.iter_mut().zip(keys) {
            if value.is_none() {
                *value = store.try_get(key).map_err(|e| Error {
                    phase: Phase::Gather,
                    ..e
                })?;
            }
        }
        if values.iter().all(Option::is_some) {
            return Ok(values.into_iter().flatten().collect());
        }
        if start.elapsed() >= timeout {
            let missing = values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_none())
                .map(|(i, _)| i)
                .collect();
            return Err(Error::new(
                Phase::Gather,
                ErrorKind::Timeout {
                    missing,
                    waited: start.elapsed(),
                },
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_micros(500));
    }
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
