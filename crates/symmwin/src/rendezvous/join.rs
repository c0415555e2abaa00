//! Join records: a rank says in the store that it has started its group's first
//! rendezvous, and which process it is, before it does anything else there, so that a
//! peer waiting for its request can name it within a second when it exits before
//! publishing one, instead of waiting out the timeout.
//!
//! The record is published at the start of the group's first rendezvous on this rank,
//! not earlier: `Group::new` stays local (no store call), and an allocation belongs to
//! no group. A rank that never starts its first rendezvous leaves no record: the
//! gather's progress line lists it as not started, and its timeout names it. The record
//! goes with our first request key, once every rank's request is in.
//!
//! The store is one other local users may write, so a record can name a rank, never
//! fail a job on one look. It is believed only when it comes from this kernel and pid
//! namespace and from our uid, and a rank is named only when the process the record
//! gives (pid, start time and uid: see `process_start`) was seen running during this
//! call and has ended since (its pidfd, through `peer_watch`), or wrote the record after
//! this call began and is gone. A record whose process was gone before the call began
//! (an earlier job's, in a store used again) names nobody.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::group::GroupShared;
use crate::locality::Locality;
use crate::process_start::{self, Liveness};
use crate::protocol::PROTOCOL_VERSION;
use crate::store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::peer_watch::{self, Watched};

/// How long one look at the missing ranks' records may take: a store slower than that
/// leaves them unlooked at until the next look (the gather's own wait reports a store
/// that does not answer).
const LOOK_LIMIT: Duration = Duration::from_secs(1);

/// What a rank publishes at the start of its group's first rendezvous.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JoinRecord {
    version: u32,
    rank: usize,
    pid: u32,
    /// Clock ticks since boot (0: unknown); see `process_start`.
    start_time: u64,
    uid: u32,
    /// Milliseconds since the epoch.
    written_at_ms: u64,
    /// Where the process runs: its pid means something only on the same kernel
    /// (boot id) and in the same pid namespace.
    locality: Locality,
}

/// Publish our join record by `deadline`: its key, to retire once every rank's request
/// of the first rendezvous is in.
pub(super) fn publish(shared: &GroupShared, deadline: Instant) -> Result<String> {
    let record = JoinRecord {
        version: PROTOCOL_VERSION.into(),
        rank: shared.rank,
        pid: std::process::id(),
        start_time: process_start::own_start_time(),
        uid: rustix::process::getuid().as_raw(),
        written_at_ms: process_start::now_ms(),
        locality: shared.locality.clone(),
    };
    // Serializing plain data into a Vec cannot fail.
    let bytes = serde_json::to_vec(&record).unwrap_or_default();
    let key = shared.namespace.join(shared.rank);
    super::publish::set(shared, &key, bytes, deadline)?;
    Ok(key)
}

/// What a missing rank's join record showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    /// Its process was seen running: watched from then on.
    Running(u32),
    /// Its process cannot be watched from here (another kernel, pid namespace or uid,
    /// or `/proc` cannot say).
    Elsewhere,
    /// Its record names a process gone before this call began: an earlier job's.
    Stale(u32),
}

/// What a gather knows of the ranks it waits for: their join records (in a group's
/// first rendezvous) and the group's watched peers.
pub(super) struct Joins<'a> {
    shared: &'a GroupShared,
    seq: u64,
    /// Join records exist only around a group's first rendezvous.
    first: bool,
    call_started_ms: u64,
    joined: BTreeMap<usize, Joined>,
    /// The pidfds of the processes seen running.
    watched: Vec<Watched>,
}

impl<'a> Joins<'a> {
    /// For the gather of rendezvous `seq`, in a call that began at `call_started_ms`.
    pub(super) fn new(shared: &'a GroupShared, seq: u64, call_started_ms: u64) -> Self {
        Joins {
            shared,
            seq,
            first: seq == 0,
            call_started_ms,
            joined: BTreeMap::new(),
            watched: Vec::new(),
        }
    }

    /// While the gather waits: the error of a missing rank whose process has ended,
    /// if one has.
    pub(super) fn tick(&self, missing: &[usize]) -> Result<()> {
        let running = missing
            .iter()
            .filter_map(|&rank| match self.joined.get(&rank) {
                Some(Joined::Running(pid)) => Some((rank, *pid)),
                _ => None,
            });
        if let Some(exited) = peer_watch::first_exited(Phase::Gather, running) {
            return Err(exited);
        }
        let peers = self.shared.peer_set();
        match missing
            .iter()
            .find_map(|&rank| peers.exit_error(Phase::Gather, rank))
        {
            Some(exited) => Err(exited),
            None => Ok(()),
        }
    }

    /// Between two waits of the gather: read the join records of the missing ranks not
    /// judged yet (by `deadline`); the error of one that joined during this call and is
    /// gone already.
    pub(super) fn between(&mut self, missing: &[usize], deadline: Instant) -> Result<()> {
        let unjudged: Vec<usize> = missing
            .iter()
            .copied()
            .filter(|r| matches!(self.joined.get(r), None | Some(Joined::Stale(_))))
            .collect();
        if !self.first || unjudged.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = unjudged
            .iter()
            .map(|&r| self.shared.namespace.join(r))
            .collect();
        let limit = deadline.min(Instant::now() + LOOK_LIMIT);
        let read = store::deadline::call(
            &self.shared.store,
            limit,
            Phase::Gather,
            || "reading join records".into(),
            move |s| {
                keys.iter()
                    .map(|k| s.try_get(k))
                    .collect::<Result<Vec<_>>>()
            },
        );
        let values = match read {
            Ok(values) => values,
            Err(e) => {
                tracing::debug!("symmwin rank {}: {e}", self.shared.rank);
                return Ok(());
            }
        };
        for (rank, bytes) in unjudged.into_iter().zip(values) {
            if let Some(bytes) = bytes {
                self.judge(rank, &bytes)?;
            }
        }
        Ok(())
    }

    /// Judge rank `rank`'s record `bytes`; the error when it names a process of this
    /// call that is gone.
    fn judge(&mut self, rank: usize, bytes: &[u8]) -> Result<()> {
        let Some(record) = serde_json::from_slice::<JoinRecord>(bytes)
            .ok()
            .filter(|r| r.rank == rank && r.version == u32::from(PROTOCOL_VERSION))
        else {
            tracing::debug!(
                "symmwin rank {}: rank {rank}'s join record is not one",
                self.shared.rank
            );
            return Ok(());
        };
        let ours = rustix::process::getuid().as_raw();
        if !self.shared.locality.shares_pids(&record.locality) || record.uid != ours {
            self.joined.insert(rank, Joined::Elsewhere);
            return Ok(());
        }
        let joined = match process_start::liveness(record.pid, record.start_time, record.uid) {
            Liveness::Alive => {
                // Watched first, then looked at again: a process running after its
                // pidfd was opened is the one the pidfd follows.
                self.watched.push(peer_watch::watch([record.pid]));
                match process_start::liveness(record.pid, record.start_time, record.uid) {
                    Liveness::Alive => Joined::Running(record.pid),
                    _ => return Err(exited(rank, record.pid)),
                }
            }
            Liveness::Gone if record.written_at_ms >= self.call_started_ms => {
                return Err(exited(rank, record.pid))
            }
            Liveness::Gone => Joined::Stale(record.pid),
            Liveness::Unknown => Joined::Elsewhere,
        };
        self.joined.insert(rank, joined);
        Ok(())
    }

    /// What the gather waits for, for its progress line.
    pub(super) fn describe(&self, missing: &[usize]) -> String {
        let mut line = format!(
            "for rank(s) {} to publish their request for rendezvous {}",
            symmwin_device::text::ranks(missing),
            self.seq
        );
        if !self.first {
            return line;
        }
        let with = |wanted: fn(Option<&Joined>) -> bool| -> Vec<usize> {
            missing
                .iter()
                .copied()
                .filter(|r| wanted(self.joined.get(r)))
                .collect()
        };
        let parts = [
            ("not started it", with(|j| j.is_none())),
            (
                "started it and running",
                with(|j| matches!(j, Some(Joined::Running(_)))),
            ),
            (
                "started it where this rank cannot watch them",
                with(|j| matches!(j, Some(Joined::Elsewhere))),
            ),
            (
                "an earlier process's record only",
                with(|j| matches!(j, Some(Joined::Stale(_)))),
            ),
        ];
        let said: Vec<String> = parts
            .iter()
            .filter(|(_, ranks)| !ranks.is_empty())
            .map(|(what, ranks)| format!("{what}: {}", symmwin_device::text::ranks(ranks)))
            .collect();
        line.push_str(&format!(" ({})", said.join("; ")));
        line
    }
}

impl store::GatherLooks for Joins<'_> {
    fn tick(&mut self, missing: &[usize]) -> Result<()> {
        Joins::tick(self, missing)
    }

    fn between(&mut self, missing: &[usize], deadline: Instant) -> Result<()> {
        Joins::between(self, missing, deadline)
    }

    fn describe(&self, missing: &[usize]) -> String {
        Joins::describe(self, missing)
    }
}

/// The error of a gather whose rank `rank`, process `pid`, ended before it published
/// its request.
fn exited(rank: usize, pid: u32) -> Error {
    let kind = ErrorKind::PeerExited {
        rank,
        pid,
        how: symmwin_device::peer_watch::exit_of(pid)
            .map_or_else(|| "exited".to_owned(), |exit| exit.how),
    };
    Error::new(Phase::Gather, kind).with_peer(rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::test_group;
    use crate::store::Store;

    fn record_of(group: &crate::group::Group, pid: u32, start_time: u64) -> JoinRecord {
        JoinRecord {
            version: PROTOCOL_VERSION.into(),
            rank: 1,
            pid,
            start_time,
            uid: rustix::process::getuid().as_raw(),
            written_at_ms: 1,
            locality: group.shared.locality.clone(),
        }
    }

    #[test]
    fn the_progress_line_names_the_missing_ranks_and_how_far_they_got() {
        let (zero, store) = test_group("joins-line", 0, 4, None);
        let mut joins = Joins::new(&zero.shared, 0, process_start::now_ms());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let started = (0..100)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                process_start::start_time(child.id()).ok()
            })
            .unwrap();
        let running = record_of(&zero, child.id(), started);
        store
            .set(
                &zero.shared.namespace.join(1),
                &serde_json::to_vec(&running).unwrap(),
            )
            .unwrap();
        let mut stale = record_of(&zero, 1 << 22, 5);
        stale.rank = 3;
        store
            .set(
                &zero.shared.namespace.join(3),
                &serde_json::to_vec(&stale).unwrap(),
            )
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        joins.between(&[1, 2, 3], deadline).unwrap();
        let line = joins.describe(&[1, 2, 3]);
        assert_eq!(
            line,
            "for rank(s) [1, 2, 3] to publish their request for rendezvous 0 (not started \
             it: [2]; started it and running: [1]; an earlier process's record only: [3])"
        );
        assert!(!line.contains("/req/"), "{line}");
        joins.tick(&[1, 2, 3]).unwrap();
        child.kill().unwrap();
        let start = Instant::now();
        let err = loop {
            if let Err(e) = joins.tick(&[1, 2, 3]) {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(1), "not named");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(
            matches!(err.kind(), ErrorKind::PeerExited { rank: 1, .. }),
            "{err}"
        );
        child.wait().unwrap();
    }

    #[test]
    fn a_record_of_another_kernel_or_uid_is_never_watched_nor_blamed() {
        let (zero, _) = test_group("joins-far", 0, 2, None);
        let mut joins = Joins::new(&zero.shared, 0, 0);
        let mut far = record_of(&zero, 1 << 22, 5);
        far.locality.boot_id = "another kernel".into();
        far.written_at_ms = u64::MAX;
        joins.judge(1, &serde_json::to_vec(&far).unwrap()).unwrap();
        assert_eq!(joins.joined.get(&1), Some(&Joined::Elsewhere));
        let mut other_uid = record_of(&zero, 1 << 22, 5);
        other_uid.uid += 1;
        other_uid.written_at_ms = u64::MAX;
        joins
            .judge(1, &serde_json::to_vec(&other_uid).unwrap())
            .unwrap();
        assert_eq!(joins.joined.get(&1), Some(&Joined::Elsewhere));
        // A gone process that wrote its record during this call is a rank that left.
        let gone = record_of(&zero, 1 << 22, 5);
        let mut recent = gone.clone();
        recent.written_at_ms = u64::MAX;
        let err = joins
            .judge(1, &serde_json::to_vec(&recent).unwrap())
            .unwrap_err();
        assert_eq!(err.peer(), Some(1), "{err}");
        assert!(joins.judge(1, b"{garbage").is_ok());
    }
}
