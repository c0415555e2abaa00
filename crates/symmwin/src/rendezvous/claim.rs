//! Requests under a rank's key that this process did not write: left by a process of
//! an earlier job (its pid is gone, so the store is stale) or written by a second
//! process given the same rank (e.g. `RANK` unset for every process).

use std::time::{Duration, Instant};

use crate::group::GroupShared;
use crate::process_start::{liveness, Liveness};
use crate::rendezvous::request::Request;
use crate::store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// How long a failed rendezvous may spend asking the store for the failure's cause: a
/// store that does not answer by then leaves the original error as it was.
const EXPLAIN_LIMIT: Duration = Duration::from_secs(1);

/// Before publishing: refuse when our key already holds another process's request.
/// A live claimant also leaves its pid under a second key, so that the process it
/// collides with names both pids when it times out. Store calls end by `deadline`.
pub(crate) fn check_own_key(
    shared: &GroupShared,
    seq: u64,
    key: &str,
    deadline: Instant,
) -> Result<()> {
    let bytes = read(shared, key, deadline, Phase::Publish)?;
    let Some(found) = bytes.and_then(|b| other_request(shared, key, shared.rank, &b)) else {
        return Ok(());
    };
    if found.alive {
        let marker = duplicate_key(shared, seq);
        let pid = std::process::id().to_string();
        let _ = store::deadline::call(
            &shared.store,
            deadline,
            Phase::Publish,
            || format!("set({marker})"),
            {
                let marker = marker.clone();
                move |s| s.set(&marker, pid.as_bytes())
            },
        );
    }
    Err(blame(shared, &found, shared.rank, Phase::Publish))
}

/// `key`'s value, or a store error once `deadline` has passed.
fn read(
    shared: &GroupShared,
    key: &str,
    deadline: Instant,
    phase: Phase,
) -> Result<Option<Vec<u8>>> {
    let owned = key.to_owned();
    store::deadline::call(
        &shared.store,
        deadline,
        phase,
        || format!("get({key})"),
        move |s| s.try_get(&owned),
    )
}

fn duplicate_key(shared: &GroupShared, seq: u64) -> String {
    shared.namespace.duplicate(seq, shared.rank)
}

/// After a failed rendezvous that began at `call_started_ms`: replace a timeout or a
/// lost peer by its cause when the store shows one (our own key overwritten, or a
/// peer's request left by a process gone before the call began: a stale store), and
/// name a peer whose process died during the call as exited, whatever ended our wait.
pub(crate) fn explain(shared: &GroupShared, seq: u64, error: Error, call_started_ms: u64) -> Error {
    if let Some(exited) = exit_behind_notice(shared, &error) {
        return exited;
    }
    if !matches!(
        error.kind(),
        ErrorKind::Timeout { .. } | ErrorKind::PeerLost(_) | ErrorKind::PeerExited { .. }
    ) {
        return error;
    }
    let deadline = Instant::now() + EXPLAIN_LIMIT;
    let lookup = |key: &str| read(shared, key, deadline, error.phase()).ok().flatten();
    let own_key = shared.namespace.request(seq, shared.rank);
    if let Some(found) =
        lookup(&own_key).and_then(|b| other_request(shared, &own_key, shared.rank, &b))
    {
        return blame(shared, &found, shared.rank, error.phase());
    }
    let marker = duplicate_key(shared, seq);
    if let Some(pid) = lookup(&marker).and_then(|v| String::from_utf8(v).ok()?.parse().ok()) {
        let found = Found {
            pid,
            alive: true,
            written_at_ms: 0,
        };
        return blame(shared, &found, shared.rank, error.phase());
    }
    if let Some(peer) = error.peer() {
        let key = shared.namespace.request(seq, peer);
        if let Some(found) = lookup(&key).and_then(|b| other_request(shared, &key, peer, &b)) {
            if !found.alive && found.gone_before(call_started_ms) {
                return blame(shared, &found, peer, error.phase());
            }
            if !found.alive {
                return died(error, peer, found.pid);
            }
        }
    }
    error
}

/// A peer's notice that it gave the call up naming a rank that we saw exit: that exit,
/// so that every survivor reports the death, whether it saw it or heard of it first.
fn exit_behind_notice(shared: &GroupShared, error: &Error) -> Option<Error> {
    if !matches!(error.kind(), ErrorKind::OutOfStep { .. }) {
        return None;
    }
    shared.peer_set().exit_error(error.phase(), error.peer()?)
}

/// `error`, as the exit of rank `peer` (process `pid`) it ended with.
fn died(error: Error, peer: usize, pid: u32) -> Error {
    if matches!(error.kind(), ErrorKind::PeerExited { rank, .. } if *rank == peer) {
        return error;
    }
    let how =
        symmwin_device::peer_watch::exit_of(pid).map_or_else(|| "exited".to_owned(), |e| e.how);
    let kind = ErrorKind::PeerExited {
        rank: peer,
        pid,
        how,
    };
    Error::new(error.phase(), kind).with_peer(peer)
}

/// A request under `key` written by a process other than this one.
struct Found {
    pid: u32,
    /// False only when the request comes from our kernel and pid namespace and no
    /// process with its pid, start time and uid runs any more.
    alive: bool,
    /// When the request was written (milliseconds since the epoch).
    written_at_ms: u64,
}

impl Found {
    /// Whether a writer that is gone was gone before a call that began at
    /// `call_started_ms`: it wrote before the call began and was never seen running
    /// by this process's peer watcher. A writer seen running, or one that wrote during
    /// the call, is a rank that died in it.
    fn gone_before(&self, call_started_ms: u64) -> bool {
        self.written_at_ms < call_started_ms && !symmwin_device::peer_watch::seen_alive(self.pid)
    }
}

/// The writer of `bytes` (read from `key`), unless it is this process.
fn other_request(shared: &GroupShared, key: &str, rank: usize, bytes: &[u8]) -> Option<Found> {
    let request = Request::decode(key, rank, bytes).ok()?;
    // A pid names the same process here only on this kernel and in our pid namespace
    // (containers can share a store and a host name with neither).
    let same_pids = shared.locality.shares_pids(&request.locality);
    if same_pids && request.pid == std::process::id() {
        return None;
    }
    let liveness = || liveness(request.pid, request.start_time, request.uid);
    Some(Found {
        pid: request.pid,
        alive: !same_pids || liveness() != Liveness::Gone,
        written_at_ms: request.written_at_ms,
    })
}

fn blame(shared: &GroupShared, found: &Found, rank: usize, phase: Phase) -> Error {
    let store = shared.store.describe().map_or_else(
        || "the job's store".to_owned(),
        |d| symmwin_device::text::clip(&d),
    );
    let kind = if !found.alive {
        ErrorKind::Store(format!(
            "stale request from pid {} in {store}: use a fresh store (rank {rank}'s key \
             was written before this call began by a process that is gone: an earlier \
             job's, or rank {rank} died before this rank came)",
            found.pid
        ))
    } else {
        ErrorKind::InvalidArgument(format!(
            "pids {} and {} both claim rank {rank} of group {:?} in {store}: give every \
             process its own rank (is RANK set?)",
            std::process::id(),
            found.pid,
            shared.name
        ))
    };
    let error = Error::new(phase, kind);
    if rank == shared.rank {
        error
    } else {
        error.with_peer(rank)
    }
}
