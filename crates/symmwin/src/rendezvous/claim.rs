//! Requests under a rank's key that this process did not write: left by a process of
//! an earlier job (its pid is gone, so the store is stale) or written by a second
//! process given the same rank (e.g. `RANK` unset for every process).

use crate::error::{Error, ErrorKind, Phase, Result};
use crate::group::GroupShared;
use crate::rendezvous::request::Request;

/// Before publishing: refuse when our key already holds another process's request.
/// A live claimant also leaves its pid under a second key, so that the process it
/// collides with names both pids when it times out.
pub(crate) fn check_own_key(shared: &GroupShared, seq: u64, key: &str) -> Result<()> {
    let Some(found) = other_request(shared, key, shared.rank) else {
        return Ok(());
    };
    if found.alive {
        let marker = duplicate_key(shared, seq);
        let _ = shared
            .store
            .set(&marker, std::process::id().to_string().as_bytes());
    }
    Err(blame(shared, &found, shared.rank, Phase::Publish))
}

fn duplicate_key(shared: &GroupShared, seq: u64) -> String {
    shared.namespace.duplicate(seq, shared.rank)
}

/// After a failed rendezvous: replace a timeout or a lost peer by its cause when the
/// store shows one (our own key overwritten, or a peer's request from a dead pid).
pub(crate) fn explain(shared: &GroupShared, seq: u64, error: Error) -> Error {
    if !matches!(
        error.kind,
        ErrorKind::Timeout { .. } | ErrorKind::PeerLost(_)
    ) {
        return error;
    }
    let own_key = shared.namespace.request(seq, shared.rank);
    if let Some(found) = other_request(shared, &own_key, shared.rank) {
        return blame(shared, &found, shared.rank, error.phase);
    }
    let marker = duplicate_key(shared, seq);
    if let Some(pid) = shared
        .store
        .try_get(&marker)
        .ok()
        .flatten()
        .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
    {
        let found = Found { pid, alive: true };
        return blame(shared, &found, shared.rank, error.phase);
    }
    if let Some(peer) = error.peer {
        let key = shared.namespace.request(seq, peer);
        if let Some(found) = other_request(shared, &key, peer) {
            if !found.alive {
                return blame(shared, &found, peer, error.phase);
            }
        }
    }
    error
}

/// A request under `key` written by a process other than this one.
struct Found {
    pid: u32,
    /// False only when the pid is on this host and certainly gone.
    alive: bool,
}

fn other_request(shared: &GroupShared, key: &str, rank: usize) -> Option<Found> {
    let bytes = shared.store.try_get(key).ok().flatten()?;
    let request = Request::decode(key, rank, &bytes).ok()?;
    let ours = request.pid == std::process::id() && request.host == shared.host;
    if ours {
        return None;
    }
    let alive = request.host != shared.host || pid_alive(request.pid);
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
    let store = shared.store.describe();
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
