use std::collections::HashMap;
use std::sync::Mutex;

use super::Store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// An in-process store, for tests with several groups or threads in one process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// Number of keys currently set.
    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn locked(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>>> {
        self.map.lock().map_err(|_| {
            Error::new(
                Phase::Publish,
                ErrorKind::Store("memory store poisoned".into()),
            )
        })
    }
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.locked()?.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.locked()?.get(key).cloned())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.locked()?;
        let current = match map.get(key) {
            Some(v) => parse_counter(key, v)?,
            None => 0,
        };
        let next = current + delta;
        map.insert(key.to_owned(), next.to_string().into_bytes());
        Ok(next)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.locked()?.remove(key);
        Ok(())
    }
}

pub(super) fn parse_counter(key: &str, value: &[u8]) -> Result<i64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            Error::new(
                Phase::Publish,
                ErrorKind::Corrupt {
                    key: key.to_owned(),
                    detail: "counter is not an integer".into(),
                },
            )
        })
}
