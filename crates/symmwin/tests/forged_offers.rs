//! Freed-window lists cannot be forged through the store: whoever can write it (a
//! TCP store is open to the whole machine) must not be able to make a rank hand out
//! memory a peer still writes. The lists travel in the authenticated socket messages
//! (and, once a group's ranks know each other's sockets, so do the requests); what a
//! store writer adds to a request is ignored, and a socket message whose
//! window-cache section was altered is dropped. Ranks are threads of this process,
//! each with its own host provider (the window cache hands memory back only to the
//! provider it came from).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use symmwin::adapter::testing::{nonzero_bytes, Message, Offer, Payload, FABRIC_LEN, MAX_OFFERED};
use symmwin::{Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider, Store};

/// A store whose every request, as written, is rewritten to claim that its rank has
/// freed (and offers to take over) every window of the first 64 rendezvous: the
/// forgery that the old request-borne lists allowed.
#[derive(Default)]
struct Forging {
    inner: MemoryStore,
    /// Requests rewritten so far.
    forged: AtomicU64,
}

fn forged(value: &[u8]) -> Vec<u8> {
    let mut request: serde_json::Value = serde_json::from_slice(value).unwrap();
    let every: Vec<u64> = (0..64).collect();
    request["cache"] = serde_json::json!({ "reuse": 2, "freed": every });
    serde_json::to_vec(&request).unwrap()
}

impl Store for Forging {
    fn set(&self, key: &str, value: &[u8]) -> symmwin::Result<()> {
        let value = if key.contains("/req/") {
            self.forged.fetch_add(1, Ordering::SeqCst);
            forged(value)
        } else {
            value.to_vec()
        };
        self.inner.set(key, &value)
    }
    fn try_get(&self, key: &str) -> symmwin::Result<Option<Vec<u8>>> {
        self.inner.try_get(key)
    }
    fn add(&self, key: &str, delta: i64) -> symmwin::Result<i64> {
        self.inner.add(key, delta)
    }
    fn delete(&self, key: &str) -> symmwin::Result<()> {
        self.inner.delete(key)
    }
}

/// Rank 0 frees a window that rank 1 keeps and writes into, while every request in the
/// store claims that every rank has freed every window. Rank 0's next allocation of
/// that size must be new memory that rank 1's writes never reach. Once rank 1 frees
/// the window too, the honest lists on the socket release it (the cache is on).
#[test]
fn a_freed_list_forged_in_the_store_releases_nothing() {
    let store = Arc::new(Forging::default());
    let config = Config::from_env().unwrap();
    let world = 2;
    let size = 5 * 4096;
    let barrier = Barrier::new(world);
    let results: Vec<(bool, usize, bool)> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..world)
            .map(|rank| {
                let (store, config, barrier) = (store.clone(), &config, &barrier);
                s.spawn(move || {
                    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
                    let spec = GroupSpec::new("forged-offers", rank, world);
                    let group = Group::new(spec, store, provider.clone(), config).unwrap();
                    let rendezvous = |bytes: usize| {
                        let alloc = Allocation::new(provider.clone(), bytes).unwrap();
                        let window = group.rendezvous(&alloc).unwrap();
                        (alloc, window)
                    };
                    let mut kept = Some(rendezvous(size));
                    if rank == 0 {
                        drop(kept.take());
                    }
                    // Two more rendezvous: they carry every rank's freed list (forged in
                    // the store) and would release, then hand out, the window.
                    for _ in 0..2 {
                        drop(rendezvous(2 * 4096));
                    }
                    let again = (rank == 0).then(|| Allocation::new(provider.clone(), size));
                    let again = again.transpose().unwrap();
                    barrier.wait();
                    if let Some((_, window)) = &kept {
                        window.write(0, 0, &vec![0xEE; size]).unwrap();
                    }
                    barrier.wait();
                    let reused = again.as_ref().is_some_and(Allocation::is_reused);
                    // SAFETY: host provider memory.
                    let dirty = again.as_ref().map_or(0, |a| unsafe { nonzero_bytes(a) });
                    drop((kept, again));
                    drop(rendezvous(2 * 4096));
                    let last = Allocation::new(provider.clone(), size).unwrap();
                    (reused, dirty, last.is_reused())
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    });
    // The requests of the group's first rendezvous went through the store, forged,
    // and were accepted; the later ones went over the sockets.
    assert_eq!(store.forged.load(Ordering::SeqCst), 2);
    assert!(!results[0].0, "rank 0 got memory rank 1 still writes");
    assert_eq!(
        results[0].1, 0,
        "rank 1's late write reached rank 0's new memory"
    );
    assert!(
        results[0].2,
        "freed on both ranks, the window is handed out"
    );
}

/// A message whose window-cache section was altered so that it claims more freed
/// windows than a message holds, or hides entries past its count, does not decode:
/// the exchange drops it as it drops any undecodable datagram.
#[test]
fn an_altered_freed_list_in_a_message_does_not_decode() {
    let freed: Vec<u64> = (10..10 + MAX_OFFERED as u64).collect();
    let message = Message {
        group: 1,
        seq: 9,
        sender: 1,
        world: 2,
        token: [3; 16],
        physical_size: 4096,
        offer: Offer::new(Some(12), &freed[..2]),
        payload: Payload::NoHandle,
    };
    let mut buf = [0u8; FABRIC_LEN];
    let good = message.encode(&mut buf).to_vec();
    let decoded = Message::decode(&good).unwrap();
    assert_eq!(decoded.offer.freed(), &freed[..2]);
    // The count byte follows the 56-byte header and the 8-byte reuse word.
    let count_at = 56 + 8;
    let mut too_many = good.clone();
    too_many[count_at] = MAX_OFFERED as u8 + 1;
    assert!(Message::decode(&too_many).is_err());
    // An entry past the count (the third), set so that a lax decoder might read it.
    let mut hidden = good.clone();
    hidden[count_at + 8 + 2 * 8] = 0x2a;
    assert!(Message::decode(&hidden).is_err());
}
