//! Requests under a rank's key that this process did not write: left by a process of
//! an earlier job (its pid is gone, so the store is stale) or written by a second
//! process given the same rank (e.g. `RANK` unset for every process).

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Phase, Result};
use crate::group::GroupShared;
use crate::rendezvous::request::Request;
use crate::store;

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

/// After a failed rendezvous: replace a timeout or a lost peer by its cause when the
/// store shows one (our own key overwritten, or a peer's request from a dead pid).
pub(crate) fn explain(shared: &GroupShared, seq: u64, error: Error) -> Error {
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
        let found = Found { pid, alive: true };
        return blame(shared, &found, shared.rank, error.phase());
    }
    if let Some(peer) = error.peer() {
        let key = shared.namespace.request(seq, peer);
        if let Some(found) = lookup(&key).and_then(|b| other_request(shared, &key, peer, &b)) {
            if !found.alive {
                return blame(shared, &found, peer, error.phase());
            }
        }
    }
    error
}

/// A request under `key` written by a process other than this one.
struct Found {
    pid: u32,
    /// False only when the pid is of our kernel and pid namespace and certainly gone.
    alive: bool,
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
    let alive = !same_pids || pid_alive(request.pid);
    Some(Found {
        pid: request.pid,
        alive,
    })
}

fn pid_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    // EPERM means the process exists under another user.
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

fn blame(shared: &GroupShared, found: &Found, rank: usize, phase: Phase) -> Error {
    let store = shared
        .store
        .describe()
        .map_or_else(|| "the job's store".to_owned(), |d| crate::text::clip(&d));
    let kind = if !found.alive {
        ErrorKind::Store(format!(
            "stale request from pid {} in {store}: use a fresh store (rank {rank}'s key \
             was written by a process that is gone: an earlier job, or rank {rank} died)",
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
