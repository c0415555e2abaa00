//! Retiring request keys: deleting the ones no peer will read again.

use std::time::Instant;

use crate::group::GroupShared;
use crate::store;
use symmwin_device::error::Phase;

/// Which of our request keys no peer needs any more after a rendezvous.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeysDone {
    /// Every rank published this rendezvous's request, so every rank is past the
    /// earlier ones (rendezvous of a group are ordered): our earlier keys can go.
    pub(super) earlier: bool,
    /// Every peer sent us its handle, which it does only after reading all requests:
    /// this rendezvous's key can go too. Otherwise (a failure, a window taken over
    /// without handles, peers on other hosts that send nothing or read our fabric
    /// handle from the request) it goes once every rank has published its next one.
    pub(super) own: bool,
}

/// Delete the request keys `done` says no peer needs any more: `own_key` (none when
/// the request went over the sockets) and those in `stale` (our keys kept for peers
/// that may still read them); what must stay is left in `stale` for a later
/// rendezvous. A store error is logged, not returned: the rendezvous itself is over.
pub(super) fn retire_keys(
    shared: &GroupShared,
    stale: &mut Vec<String>,
    own_key: Option<String>,
    done: KeysDone,
) {
    let mut doomed: Vec<String> = if done.earlier {
        std::mem::take(stale)
    } else {
        Vec::new()
    };
    match (own_key, done.own) {
        (Some(key), true) => doomed.push(key),
        (Some(key), false) => stale.push(key),
        (None, _) => {}
    }
    if doomed.is_empty() {
        return;
    }
    let rank = shared.rank;
    let deleted = store::deadline::call(
        &shared.store,
        Instant::now() + shared.timeout,
        Phase::Teardown,
        || "deleting our request keys".into(),
        move |s| {
            for key in &doomed {
                if let Err(e) = s.delete(key) {
                    tracing::warn!("symmwin rank {rank}: could not delete {key}: {e}");
                }
            }
            Ok(())
        },
    );
    if let Err(e) = deleted {
        tracing::warn!("symmwin rank {rank}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::test_group;
    use crate::store::Store;

    #[test]
    fn keys_go_only_once_no_peer_needs_them() {
        let (group, store) = test_group("retire", 0, 2, None);
        for key in ["a", "b", "c", "d"] {
            store.set(key, b"x").unwrap();
        }
        let present = |key: &str| store.try_get(key).unwrap().is_some();
        let mut stale = vec!["a".to_owned()];

        // A failed gather: nothing goes, our key waits with the earlier ones.
        let none = KeysDone {
            earlier: false,
            own: false,
        };
        retire_keys(&group.shared, &mut stale, Some("b".into()), none);
        assert_eq!(stale, ["a", "b"]);
        assert!(present("a") && present("b"));

        // Every rank published, but a peer read our handle from the store: the
        // earlier keys go, this one stays.
        let earlier = KeysDone {
            earlier: true,
            own: false,
        };
        retire_keys(&group.shared, &mut stale, Some("c".into()), earlier);
        assert_eq!(stale, ["c"]);
        assert!(!present("a") && !present("b") && present("c"));

        // Every peer sent its handle: all of ours go.
        let all = KeysDone {
            earlier: true,
            own: true,
        };
        retire_keys(&group.shared, &mut stale, Some("d".into()), all);
        assert!(stale.is_empty());
        assert!(!present("c") && !present("d"));
    }
}
