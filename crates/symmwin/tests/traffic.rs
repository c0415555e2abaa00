//! Store operations and socket messages per rendezvous: a constant number per rank,
//! so the job's total grows linearly with the world size. Ranks are threads of this
//! process (host provider, in-memory store, real sockets).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use symmwin::{Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider, Store};

/// A store that counts every call it gets, by operation.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    set: AtomicU64,
    try_get: AtomicU64,
    wait_all: AtomicU64,
    add: AtomicU64,
    delete: AtomicU64,
}

impl Counting {
    fn counts(&self) -> BTreeMap<&'static str, u64> {
        [
            ("set", &self.set),
            ("try_get", &self.try_get),
            ("wait_all", &self.wait_all),
            ("add", &self.add),
            ("delete", &self.delete),
        ]
        .into_iter()
        .map(|(name, n)| (name, n.load(Ordering::SeqCst)))
        .collect()
    }
}

impl Store for Counting {
    fn set(&self, key: &str, value: &[u8]) -> symmwin::Result<()> {
        self.set.fetch_add(1, Ordering::SeqCst);
        self.inner.set(key, value)
    }
    fn try_get(&self, key: &str) -> symmwin::Result<Option<Vec<u8>>> {
        self.try_get.fetch_add(1, Ordering::SeqCst);
        self.inner.try_get(key)
    }
    fn add(&self, key: &str, delta: i64) -> symmwin::Result<i64> {
        self.add.fetch_add(1, Ordering::SeqCst);
        self.inner.add(key, delta)
    }
    fn delete(&self, key: &str) -> symmwin::Result<()> {
        self.delete.fetch_add(1, Ordering::SeqCst);
        self.inner.delete(key)
    }
    /// One call, as c10d's `wait` + `multiGet` is one round trip each; the polling
    /// inside goes to the inner store uncounted.
    fn wait_all(
        &self,
        keys: &[String],
        timeout: Duration,
    ) -> symmwin::Result<Vec<Option<Vec<u8>>>> {
        self.wait_all.fetch_add(1, Ordering::SeqCst);
        self.inner.wait_all(keys, timeout)
    }
}

/// Every rank of `groups` makes one window of `size` bytes at once.
fn rendezvous_all(groups: &[Group], provider: &Arc<dyn Provider>, size: usize) {
    std::thread::scope(|s| {
        let ranks: Vec<_> = groups
            .iter()
            .map(|g| {
                s.spawn(move || {
                    let alloc = Allocation::new(provider.clone(), size).unwrap();
                    drop(g.rendezvous(&alloc).unwrap());
                })
            })
            .collect();
        for rank in ranks {
            rank.join().unwrap();
        }
    });
}

/// Store calls and messages of one rendezvous (after a first one made the pad pool).
fn traffic(world: usize) -> (BTreeMap<&'static str, u64>, u64, u64) {
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let store = Arc::new(Counting::default());
    let config = Config::from_env().unwrap();
    let groups: Vec<Group> = (0..world)
        .map(|rank| {
            Group::new(
                GroupSpec::new(format!("traffic-{world}"), rank, world),
                store.clone(),
                provider.clone(),
                &config,
            )
            .unwrap()
        })
        .collect();
    rendezvous_all(&groups, &provider, 4096);
    let before = store.counts();
    let sent: u64 = groups.iter().map(|g| g.exchange_counts().sent).sum();
    let accepted: u64 = groups.iter().map(|g| g.exchange_counts().accepted).sum();
    rendezvous_all(&groups, &provider, 3 * 4096);
    let calls = store
        .counts()
        .into_iter()
        .map(|(op, n)| (op, n - before[op]))
        .collect();
    let sent = groups.iter().map(|g| g.exchange_counts().sent).sum::<u64>() - sent;
    let accepted = groups
        .iter()
        .map(|g| g.exchange_counts().accepted)
        .sum::<u64>()
        - accepted;
    (calls, sent, accepted)
}

#[test]
fn one_rendezvous_costs_each_rank_three_store_calls_and_one_message_per_peer() {
    for world in [2, 4] {
        let (calls, sent, accepted) = traffic(world);
        let w = world as u64;
        // Per rank: publish, one wait for every peer's request, delete our key.
        let expected: BTreeMap<&str, u64> = [
            ("set", w),
            ("try_get", 0),
            ("wait_all", w),
            ("add", 0),
            ("delete", w),
        ]
        .into_iter()
        .collect();
        assert_eq!(calls, expected, "store calls at world {world}");
        assert_eq!(sent, w * (w - 1), "messages sent at world {world}");
        assert_eq!(accepted, w * (w - 1), "handles accepted at world {world}");
    }
}
