//! Store operations and socket messages per rendezvous: a group's first rendezvous
//! costs each rank a constant number of store calls; after it the requests travel over
//! the sockets, so a rendezvous costs no store call and one message per peer per rank,
//! also when every rank takes a freed window over (the message then carries no handle):
//! everything grows linearly with the world size. Ranks are threads of this
//! process, each with its own host provider (the window cache hands memory back only
//! to the provider it came from), an in-memory store and real sockets.

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

/// Every rank of `groups` makes one window of `size` bytes at once and frees it;
/// how many of the ranks' allocations were windows taken back from the cache.
fn rendezvous_all(groups: &[(Group, Arc<dyn Provider>)], size: usize) -> usize {
    std::thread::scope(|s| {
        let ranks: Vec<_> = groups
            .iter()
            .map(|(g, provider)| {
                s.spawn(move || {
                    let alloc = Allocation::new(provider.clone(), size).unwrap();
                    drop(g.rendezvous(&alloc).unwrap());
                    alloc.is_reused()
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|rank| usize::from(rank.join().unwrap()))
            .sum()
    })
}

/// What one step cost: store calls by operation, messages sent, handles accepted.
type Traffic = (BTreeMap<&'static str, u64>, u64, u64);

fn totals(store: &Counting, groups: &[(Group, Arc<dyn Provider>)]) -> Traffic {
    let counts = groups.iter().map(|(g, _)| g.exchange_counts());
    let (sent, accepted) = counts.fold((0, 0), |(s, a), c| (s + c.sent, a + c.accepted));
    (store.counts(), sent, accepted)
}

fn since(before: &Traffic, after: Traffic) -> Traffic {
    let calls = after
        .0
        .into_iter()
        .map(|(op, n)| (op, n - before.0[op]))
        .collect();
    (calls, after.1 - before.1, after.2 - before.2)
}

/// Traffic of a group's first rendezvous (which also makes the pad pool), of a
/// rendezvous of fresh memory after it, and of one where every rank re-allocates a
/// size all of them freed.
fn traffic(world: usize) -> [Traffic; 3] {
    let store = Arc::new(Counting::default());
    let config = Config::from_env().unwrap();
    let groups: Vec<(Group, Arc<dyn Provider>)> = (0..world)
        .map(|rank| {
            let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
            let spec = GroupSpec::new(format!("traffic-{world}"), rank, world);
            let group = Group::new(spec, store.clone(), provider.clone(), &config).unwrap();
            (group, provider)
        })
        .collect();
    let size = 3 * 4096;
    let before = totals(&store, &groups);
    rendezvous_all(&groups, 4096);
    let first = since(&before, totals(&store, &groups));
    let before = totals(&store, &groups);
    assert_eq!(rendezvous_all(&groups, size), 0, "fresh memory");
    let fresh = since(&before, totals(&store, &groups));
    // The next rendezvous tells every rank that all of them freed the first window
    // of `size`; the one after that takes it over.
    assert_eq!(rendezvous_all(&groups, size), 0, "not released yet");
    let before = totals(&store, &groups);
    assert_eq!(rendezvous_all(&groups, size), world, "every rank reuses");
    [first, fresh, since(&before, totals(&store, &groups))]
}

/// `n` store calls of each operation given, none of the others.
fn calls(n: u64, ops: &[&'static str]) -> BTreeMap<&'static str, u64> {
    ["set", "try_get", "wait_all", "add", "delete"]
        .into_iter()
        .map(|op| (op, if ops.contains(&op) { n } else { 0 }))
        .collect()
}

#[test]
fn a_rendezvous_costs_each_rank_a_few_store_calls_and_one_message_per_peer() {
    for world in [2, 4] {
        let [first, fresh, reused] = traffic(world);
        let w = world as u64;
        let peers = w * (w - 1);
        // The first: per rank, its join record, a look at its own key, publish, one
        // wait for every peer's request, delete both keys; then the pad pool's, over
        // the sockets. A message to every peer, with a handle, for each of the two.
        let mut expected = calls(w, &["try_get", "wait_all"]);
        expected.insert("set", 2 * w);
        expected.insert("delete", 2 * w);
        assert_eq!(first.0, expected, "first store calls at world {world}");
        assert_eq!(
            (first.1, first.2),
            (2 * peers, 2 * peers),
            "first, world {world}"
        );
        // Fresh memory afterwards: no store call, one message and handle per peer.
        assert_eq!(fresh.0, calls(0, &[]), "store calls at world {world}");
        assert_eq!(fresh.1, peers, "messages sent at world {world}");
        assert_eq!(fresh.2, peers, "handles accepted at world {world}");
        // Taking a freed window over: one message per peer (the request and the
        // offer, which is what releases the window) with no handle in it.
        assert_eq!(
            reused.0,
            calls(0, &[]),
            "store calls of a reuse at world {world}"
        );
        assert_eq!((reused.1, reused.2), (peers, 0), "reuse at world {world}");
    }
}
