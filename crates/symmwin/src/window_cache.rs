//! Freed windows, kept whole so that a later allocation of the same size can take one
//! back without creating, exporting, importing or mapping anything.
//!
//! # The invariant: memory a peer may still write is never handed out again
//!
//! Freeing stays purely local: when this rank's last user of a window and of the
//! allocation behind it are gone, the window is *parked* here as it is (the span
//! with every rank's slot still mapped, our memory, our local view). Nobody writes
//! through a parked window, but peers may still hold their own windows over our
//! memory, so a parked window is not handed out. In every later rendezvous of the
//! group, each rank's first message to each peer over the exchange socket lists the
//! windows that rank has parked ([`Offer::freed`]). A window that *every* rank lists
//! has no user left on any rank: it is *released* on every rank at once (all of them
//! get the same offers), and only then may an allocation take it.
//!
//! The window is reused as a unit: the allocation gets our memory back, and the
//! rendezvous that follows offers the window ([`Offer::reuse`]). If every rank
//! offers the same window, every rank's new allocation is its own slot of that
//! window, so the span is already right: the rendezvous skips export, exchange,
//! import and map. Otherwise the old span is dropped and the rendezvous runs as for
//! fresh memory (which, being released everywhere, it is).
//!
//! Only windows of groups whose ranks all share one kernel and socket directory are
//! parked: a window of a group that spans hosts has unmapped slots and peers that
//! send no handle, so it is freed at once (see `docs/multi-node.md`).
//!
//! Like freeing without a cache, parking assumes no device work still uses the window.
//! The cache is bounded (per rank: 8 parked windows per group, 32 and 4 GiB in all;
//! 4 released windows and 4 GiB), oldest out first; what falls out is really freed,
//! as before, and so is everything parked for a group that is dropped. [`flush`]
//! frees it all at once. `SYMMWIN_DEBUG_FREE=1` turns reuse off, so that a pointer
//! kept after free faults instead of reaching new memory ([`symmwin_device::debug_free`]).
//! The offers never go through the store, which other users of the machine may be
//! able to write (a TCP store is open to it): a message is accepted only from the
//! process that published the sender rank's request, under our uid, carrying our
//! token, and a rank whose offer did not come counts as having freed nothing. So
//! nobody who can only write the store can make a rank reuse a window early.
//!
//! [`Offer::freed`]: crate::exchange::Offer::freed
//! [`Offer::reuse`]: crate::exchange::Offer::reuse

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use symmwin_device::lock::Recover;

use symmwin_device::layout::FlatLayout;
use symmwin_device::provider::{Memory, Provider, Span};

/// Parked windows a rank announces per group (older ones are really freed).
pub(crate) const MAX_FREED: usize = crate::exchange::wire::MAX_OFFERED;
/// Released windows kept for reuse, and their total size on this rank.
const MAX_RELEASED: usize = 4;
const MAX_RELEASED_BYTES: usize = 4 << 30;
/// Parked windows over all groups, and their total size on this rank.
const MAX_PARKED: usize = 32;
const MAX_PARKED_BYTES: usize = 4 << 30;

/// A window of `group`'s rendezvous number `seq`, every rank's slot mapped.
pub(crate) struct WindowSpan {
    pub(crate) group: GroupKey,
    pub(crate) seq: u64,
    pub(crate) span: Box<dyn Span>,
    pub(crate) layout: FlatLayout,
}

impl WindowSpan {
    /// Whether this is a window of `group`.
    pub(crate) fn of(&self, group: GroupKey) -> bool {
        self.group == group
    }
}

/// Which group object a window belongs to: a number no other group object of this
/// process has, so the cache needs nothing of the group but its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupKey(u64);

impl GroupKey {
    /// A key no group object of this process had before.
    pub(crate) fn unique() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        GroupKey(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A freed window with our memory and our local view of it.
pub(crate) struct Parked {
    pub(crate) window: WindowSpan,
    pub(crate) memory: Arc<dyn Memory>,
    pub(crate) local: Box<dyn Span>,
    pub(crate) provider: Arc<dyn Provider>,
}

#[derive(Default)]
struct Cache {
    /// Freed here, oldest first; peers may still use them.
    parked: VecDeque<Parked>,
    /// Freed on every rank and zeroed, oldest first: free to hand out.
    released: VecDeque<Parked>,
    /// Released windows being zeroed on the worker thread, by [`Parked::key`].
    zeroing: Vec<(usize, usize)>,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    parked: VecDeque::new(),
    released: VecDeque::new(),
    zeroing: Vec::new(),
});

/// Signalled whenever a released window has been zeroed.
static ZEROED: Condvar = Condvar::new();

impl Parked {
    /// What an allocation asks the cache for: the provider (by address) and the size
    /// of our memory.
    fn key(&self) -> (usize, usize) {
        (provider_key(&self.provider), self.memory.len())
    }
}

fn provider_key(provider: &Arc<dyn Provider>) -> usize {
    Arc::as_ptr(provider) as *const () as usize
}

/// Run `f` on the cache; what it returns to free is freed on the worker thread, off
/// the caller's path (unmapping a large window takes milliseconds).
fn with_cache<T>(f: impl FnOnce(&mut Cache) -> (T, Vec<Parked>)) -> T {
    let (value, evicted) = locked(f);
    if !evicted.is_empty() {
        crate::worker::in_background(move || drop(evicted));
    }
    value
}

fn locked<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    f(&mut lock())
}

fn lock() -> MutexGuard<'static, Cache> {
    CACHE.lock().recover()
}

/// Keep a window freed on this rank until every rank has freed it (unless reuse is
/// off: [`symmwin_device::debug_free`]).
pub(crate) fn park(entry: Parked) {
    if symmwin_device::debug_free::enabled() {
        return drop(entry);
    }
    with_cache(|cache| {
        let group = entry.window.group;
        cache.parked.push_back(entry);
        let mut evicted = Vec::new();
        let in_group = |p: &Parked| p.window.of(group);
        while cache.parked.iter().filter(|p| in_group(p)).count() > MAX_FREED {
            if let Some(i) = cache.parked.iter().position(in_group) {
                evicted.extend(cache.parked.remove(i));
            }
        }
        let bytes = |c: &Cache| c.parked.iter().map(|p| p.memory.len()).sum::<usize>();
        while cache.parked.len() > MAX_PARKED
            || (cache.parked.len() > 1 && bytes(cache) > MAX_PARKED_BYTES)
        {
            evicted.extend(cache.parked.pop_front());
        }
        ((), evicted)
    })
}

/// A group is gone: its parked windows can never be released, so they are freed
/// (here and now: a group's teardown is not on any rendezvous's path).
pub(crate) fn forget_group(group: GroupKey) {
    let gone: Vec<Parked> = locked(|cache| {
        let (gone, kept): (Vec<Parked>, Vec<Parked>) =
            cache.parked.drain(..).partition(|p| p.window.of(group));
        cache.parked = kept.into();
        gone
    });
    drop(gone);
    crate::worker::drain();
}

/// Rendezvous numbers of `group`'s windows parked here, oldest first.
pub(crate) fn parked_in(group: GroupKey) -> Vec<u64> {
    with_cache(|cache| {
        let seqs = cache
            .parked
            .iter()
            .filter(|p| p.window.of(group))
            .map(|p| p.window.seq)
            .collect();
        (seqs, Vec::new())
    })
}

/// `group`'s windows `seqs` are freed on every rank: make them available once our
/// memory in them is zeroed again, which happens on the worker thread, off the
/// rendezvous's path (nobody writes a window freed on every rank).
pub(crate) fn release(group: GroupKey, seqs: &[u64]) {
    if seqs.is_empty() {
        return;
    }
    let now = locked(|cache| {
        let (now, kept): (Vec<Parked>, Vec<Parked>) = cache
            .parked
            .drain(..)
            .partition(|p| p.window.of(group) && seqs.contains(&p.window.seq));
        cache.parked = kept.into();
        now
    });
    zero_then_release(now);
}

/// Put back a released window an allocation took but never used in a rendezvous (its
/// user may have written into it: it is zeroed again first).
pub(crate) fn restore(entry: Parked) {
    if symmwin_device::debug_free::enabled() {
        return drop(entry);
    }
    zero_then_release(vec![entry]);
}

/// Zero our memory in each of `entries` on the worker thread, then hand it out; one
/// whose zeroing fails is freed instead.
fn zero_then_release(entries: Vec<Parked>) {
    if entries.is_empty() {
        return;
    }
    locked(|cache| cache.zeroing.extend(entries.iter().map(Parked::key)));
    crate::worker::in_background(move || {
        for entry in entries {
            let key = entry.key();
            let zeroed = entry.local.zero(0, entry.memory.len());
            let evicted = locked(|cache| {
                if let Some(i) = cache.zeroing.iter().position(|k| *k == key) {
                    cache.zeroing.swap_remove(i);
                }
                match zeroed {
                    Ok(()) => {
                        cache.released.push_back(entry);
                        trim_released(cache)
                    }
                    Err(e) => {
                        tracing::warn!("a freed window could not be zeroed, so it is freed: {e}");
                        vec![entry]
                    }
                }
            });
            ZEROED.notify_all();
            drop(evicted);
        }
    });
}

fn trim_released(cache: &mut Cache) -> Vec<Parked> {
    let mut evicted = Vec::new();
    let bytes = |c: &Cache| c.released.iter().map(|p| p.memory.len()).sum::<usize>();
    while cache.released.len() > MAX_RELEASED
        || (cache.released.len() > 1 && bytes(cache) > MAX_RELEASED_BYTES)
    {
        evicted.extend(cache.released.pop_front());
    }
    evicted
}

/// A released, zeroed window whose own memory is `len` bytes of `provider`, newest
/// first; one of that size still being zeroed is waited for (zeroing costs less than
/// creating and exporting new memory).
pub(crate) fn take(provider: &Arc<dyn Provider>, len: usize) -> Option<Parked> {
    let key = (provider_key(provider), len);
    let on_worker = crate::worker::on_worker();
    let mut cache = lock();
    loop {
        if let Some(i) = cache.released.iter().rposition(|p| p.key() == key) {
            return cache.released.remove(i);
        }
        if on_worker || !cache.zeroing.contains(&key) {
            return None;
        }
        cache = ZEROED.wait(cache).recover();
    }
}

/// Really free every cached window (parked and released): what a job calls before
/// it counts its device memory, or when it needs the memory for something else.
/// Windows parked here but still used by peers stay mapped there; only our mappings
/// and our references go.
pub fn flush() {
    // Windows being zeroed land in the released list first.
    crate::worker::drain();
    let all: Vec<Parked> = locked(|cache| {
        let mut all: Vec<Parked> = cache.parked.drain(..).collect();
        all.extend(cache.released.drain(..));
        all
    });
    drop(all);
    // And whatever an earlier eviction left to the worker thread.
    crate::worker::drain();
}

/// Cached windows on this rank: `(parked, released)` (released counts those still
/// being zeroed).
pub fn counts() -> (usize, usize) {
    locked(|cache| {
        let released = cache.released.len() + cache.zeroing.len();
        (cache.parked.len(), released)
    })
}
