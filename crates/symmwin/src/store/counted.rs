//! Counting a group's store operations, for `symmwin bench rendezvous` and tests:
//! each call of the [`Store`] trait is one operation (a `wait_all` is one, as c10d's
//! `wait` + `multiGet` are one round trip each, however a store implements it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::Store;
use symmwin_device::error::Result;

/// `inner`, counting every call into `ops`.
pub(crate) struct Counted {
    inner: Arc<dyn Store>,
    ops: Arc<AtomicU64>,
}

impl Counted {
    /// Wrap `inner`; the count goes to `ops`.
    pub(crate) fn new(inner: Arc<dyn Store>, ops: Arc<AtomicU64>) -> Self {
        Counted { inner, ops }
    }

    fn count(&self) -> &dyn Store {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.inner.as_ref()
    }
}

impl Store for Counted {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.count().set(key, value)
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.count().try_get(key)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.count().add(key, delta)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.count().delete(key)
    }
    fn describe(&self) -> Option<String> {
        self.inner.describe()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn wait_all(&self, keys: &[String], timeout: Duration) -> Result<Vec<Option<Vec<u8>>>> {
        self.count().wait_all(keys, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn every_call_counts_once_and_reaches_the_store() {
        let inner = Arc::new(MemoryStore::new());
        let ops = Arc::new(AtomicU64::new(0));
        let counted = Counted::new(inner.clone(), ops.clone());
        counted.set("a", b"1").unwrap();
        let keys = ["a".to_owned()];
        let got = counted.wait_all(&keys, Duration::from_secs(1)).unwrap();
        assert_eq!(got, vec![Some(b"1".to_vec())]);
        counted.delete("a").unwrap();
        assert_eq!(ops.load(Ordering::Relaxed), 3);
        assert!(inner.is_empty());
    }
}
