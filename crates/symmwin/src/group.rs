//! A group: the ranks that rendezvous together, their store and this rank's socket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use symmwin_device::lock::Recover;

use crate::config::Config;
use crate::exchange::Endpoint;
use crate::locality::Locality;
use crate::signal::pad_pool::PadPools;
use crate::signal::remote::RemotePeers;
use crate::store::{Namespace, Store};
use symmwin_device::error::{Error, Phase, Result};
use symmwin_device::peer_watch::PeerSet;
use symmwin_device::provider::Provider;

/// The largest world size a group accepts. Every rank's request and slot is held in
/// memory during a rendezvous, so a larger world could only end in an allocation
/// failure (an abort); global ranks must also fit the C ABI's `int`.
pub const MAX_WORLD: usize = 1 << 20;

/// Who is in a group and which one we are.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// Group name; keys in the store are namespaced by it.
    pub name: String,
    /// This process's rank in the group.
    pub rank: usize,
    /// Number of ranks.
    pub world: usize,
    /// Global rank of each group rank (identity when empty).
    pub global_ranks: Vec<i32>,
}

impl GroupSpec {
    /// A group whose ranks are also the global ranks.
    pub fn new(name: impl Into<String>, rank: usize, world: usize) -> Self {
        GroupSpec {
            name: name.into(),
            rank,
            world,
            global_ranks: Vec::new(),
        }
    }

    /// Check the spec names a rank of a valid group; the global rank of every group
    /// rank (0..world when none were given).
    fn checked_global_ranks(&self) -> Result<Vec<i32>> {
        if self.world > MAX_WORLD {
            return Err(Error::invalid(format!(
                "world size {} is larger than symmwin supports ({MAX_WORLD})",
                self.world
            )));
        }
        if self.world == 0 || self.rank >= self.world {
            return Err(Error::invalid(format!(
                "rank {} is not in a group of {} ranks",
                self.rank, self.world
            )));
        }
        if self.name.is_empty() {
            return Err(Error::invalid("group name is empty"));
        }
        let global_ranks: Vec<i32> = if self.global_ranks.is_empty() {
            // MAX_WORLD < i32::MAX, so every rank converts.
            (0..self.world)
                .filter_map(|r| i32::try_from(r).ok())
                .collect()
        } else if self.global_ranks.len() == self.world {
            if let Some(bad) = self.global_ranks.iter().find(|&&g| g < 0) {
                return Err(Error::invalid(format!("global rank {bad} is negative")));
            }
            self.global_ranks.clone()
        } else {
            return Err(Error::invalid(format!(
                "{} global ranks given for a group of {}",
                self.global_ranks.len(),
                self.world
            )));
        };
        Ok(global_ranks)
    }
}

/// The part of a group that windows keep alive.
pub(crate) struct GroupShared {
    pub(crate) name: String,
    pub(crate) id: u64,
    /// This group object's key in the window cache.
    pub(crate) cache_key: crate::window_cache::GroupKey,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) global_ranks: Vec<i32>,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) namespace: Namespace,
    pub(crate) timeout: Duration,
    /// Limit of a device-side wait given none (see `config`).
    pub(crate) device_timeout: Duration,
    pub(crate) host: String,
    pub(crate) locality: Locality,
    /// The process group's backend, for peers that are not mapped (set by adapters).
    pub(crate) remote: RwLock<Option<Arc<dyn RemotePeers>>>,
    pub(crate) pads: Arc<PadPools>,
    /// Rendezvous calls this rank answered with "not symmetric" (memory that is not
    /// symmwin's) without taking part; carried in every request, so a rank that
    /// skipped a rendezvous its peers took part in is named instead of mis-wired.
    pub(crate) foreign_calls: AtomicU64,
    /// Store operations of this rank on this group so far (counted by `store`).
    pub(crate) store_ops: Arc<AtomicU64>,
    /// The watched local peers, as the waits name them (set once a rendezvous proved
    /// them local; [`PeerSet::NONE`] until then).
    pub(crate) peers: RwLock<PeerSet>,
    /// Rendezvous of one group are collective and ordered, so they run one at a time.
    pub(crate) state: Mutex<GroupState>,
}

impl GroupShared {
    /// The watched local peers, for a wait to name one that has ended.
    pub(crate) fn peer_set(&self) -> PeerSet {
        *self.peers.read().recover()
    }

    /// Give an error this rank's context: its rank, and the subgroup when group
    /// ranks are not global ranks.
    pub(crate) fn context(&self, e: Error) -> Error {
        e.at_rank(self.rank)
            .in_group(&self.name, &self.global_ranks)
    }
}

impl Drop for GroupShared {
    /// Windows of this group parked in the window cache can never be released now.
    fn drop(&mut self) {
        crate::window_cache::forget_group(self.cache_key);
    }
}

pub(crate) struct GroupState {
    pub(crate) next_seq: u64,
    pub(crate) endpoint: Endpoint,
    /// Our request keys of failed rendezvous (and of the last one, when it took a
    /// released window over without handles). A slower peer may still need to read
    /// them to reach the same verdict, so they go only after the next success.
    pub(crate) stale_keys: Vec<String>,
    /// Every rank's address, once a rendezvous showed that all ranks share this host
    /// and socket directory: later requests travel over the sockets, not the store.
    pub(crate) direct: Option<Vec<crate::exchange::PeerAddress>>,
    /// Every rank's address as the last gather through the store read it: whom to tell
    /// when we give a rendezvous up.
    pub(crate) addresses: Option<Vec<crate::exchange::PeerAddress>>,
    /// Set by the first rendezvous that failed here or that a peer gave up: every later
    /// one fails at once with it.
    pub(crate) out_of_step: Option<OutOfStep>,
    /// This group's local peers, watched for their deaths from the first rendezvous
    /// that proved them local on.
    pub(crate) watched: Option<symmwin_device::peer_watch::Registered>,
}

/// Since when and where a group's ranks stopped agreeing on which call is which.
#[derive(Debug, Clone)]
pub(crate) struct OutOfStep {
    pub(crate) since: u64,
    pub(crate) rank: usize,
    pub(crate) why: String,
}

impl OutOfStep {
    /// The error of every rendezvous after the one that failed.
    pub(crate) fn error(&self, our_rank: usize) -> Error {
        let error = Error::new(
            Phase::Gather,
            symmwin_device::error::ErrorKind::OutOfStep {
                since: self.since,
                rank: self.rank,
                why: self.why.clone(),
            },
        );
        match self.rank == our_rank {
            true => error,
            false => error.with_peer(self.rank),
        }
    }
}

impl GroupShared {
    pub(crate) fn remote_peers(&self) -> Option<Arc<dyn RemotePeers>> {
        self.remote.read().recover().clone()
    }
}

/// A set of ranks that create windows together. Cheap to clone.
#[derive(Clone)]
pub struct Group {
    pub(crate) shared: Arc<GroupShared>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.shared.name)
            .field("rank", &self.shared.rank)
            .field("world", &self.shared.world)
            .finish()
    }
}

impl Group {
    /// Join a group. Local only: binds this rank's socket; nothing is exchanged yet.
    pub fn new(
        spec: GroupSpec,
        store: Arc<dyn Store>,
        provider: Arc<dyn Provider>,
        config: &Config,
    ) -> Result<Self> {
        let global_ranks = spec.checked_global_ranks()?;
        let id = crate::token::stable_id(&spec.name);
        let endpoint = Endpoint::bind(&config.socket_dir, id).map_err(|e| e.at_rank(spec.rank))?;
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        tracing::debug!(
            "group {:?}: rank {} of {}, waits for peers up to {}",
            spec.name,
            spec.rank,
            spec.world,
            symmwin_device::text::Seconds(config.timeout)
        );
        let locality = Locality::here(
            config.host_id.as_deref(),
            &config.socket_dir,
            provider.fabric_domain(),
        )
        .map_err(|e| e.at_rank(spec.rank))?;
        let store_ops = Arc::new(AtomicU64::new(0));
        let store: Arc<dyn Store> = Arc::new(crate::store::Counted::new(store, store_ops.clone()));
        Ok(Group {
            shared: Arc::new(GroupShared {
                namespace: Namespace::new(&spec.name),
                name: spec.name,
                id,
                cache_key: crate::window_cache::GroupKey::unique(),
                rank: spec.rank,
                world: spec.world,
                global_ranks,
                provider,
                store,
                timeout: config.timeout,
                device_timeout: config.device_timeout,
                host,
                locality,
                remote: RwLock::new(None),
                pads: Arc::default(),
                foreign_calls: AtomicU64::new(0),
                peers: RwLock::new(PeerSet::NONE),
                store_ops,
                state: Mutex::new(GroupState {
                    next_seq: 0,
                    endpoint,
                    stale_keys: Vec::new(),
                    direct: None,
                    addresses: None,
                    out_of_step: None,
                    watched: None,
                }),
            }),
        })
    }

    /// Group name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.shared.world
    }

    /// The provider windows of this group use.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.shared.provider
    }

    /// Global rank of every group rank.
    pub fn global_ranks(&self) -> &[i32] {
        &self.shared.global_ranks
    }

    /// Record a rendezvous call this rank answered "not symmetric" (its memory is not
    /// symmwin's) without taking part. Local: no store or peer is involved.
    pub fn note_foreign_rendezvous(&self) {
        self.shared.foreign_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Reach peers that windows of this group cannot map (other hosts) through
    /// `remote`, the group's own process-group backend. Replaces an earlier one.
    pub fn set_remote_peers(&self, remote: Arc<dyn RemotePeers>) {
        let mut slot = self.shared.remote.write().recover();
        *slot = Some(remote);
    }

    /// The process-group backend set by [`Group::set_remote_peers`], if any.
    pub fn remote_peers(&self) -> Option<Arc<dyn RemotePeers>> {
        self.shared.remote_peers()
    }

    /// Pad pool windows this rank holds (diagnostics: they never grow per window).
    pub fn pad_pool_count(&self) -> usize {
        self.shared.pads.pool_count()
    }

    /// Messages the exchange socket rejected so far.
    pub fn rejected_messages(&self) -> u64 {
        self.shared
            .state
            .lock()
            .map(|s| s.endpoint.rejected())
            .unwrap_or(0)
    }

    /// Messages sent and handles accepted by this rank's socket so far: one of each
    /// per peer per rendezvous, so they grow linearly with the world size.
    pub fn exchange_counts(&self) -> crate::exchange::ExchangeCounts {
        self.shared
            .state
            .lock()
            .map(|s| s.endpoint.counts())
            .unwrap_or_default()
    }

    /// Store operations this rank has made for this group so far: a constant number
    /// per rendezvous (see `symmwin bench rendezvous`).
    pub fn store_ops(&self) -> u64 {
        self.shared
            .store_ops
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn lock_state(&self) -> Result<std::sync::MutexGuard<'_, GroupState>> {
        self.shared.state.lock().map_err(|_| {
            Error::new(
                Phase::Gather,
                symmwin_device::error::ErrorKind::Internal(
                    "an earlier rendezvous on this group panicked".into(),
                ),
            )
            .at_rank(self.shared.rank)
        })
    }
}
