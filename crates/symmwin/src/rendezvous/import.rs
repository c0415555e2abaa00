//! Importing every peer's handle before any slot is mapped, so that the slots can then
//! be mapped in one batch.
//!
//! With two handles or more, the imports run side by side on the runtime's worker
//! pool ([`crate::worker`]): importing a CUDA handle costs most of a millisecond
//! whatever the size, so at world 8 a serial loop costs seven of them. A
//! single import runs on the caller: a thread hop would only add to it.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmwin_device::lock::Recover;

use crate::worker::{self, Started};
use symmwin_device::error::{Error, ErrorKind, Phase, Result};
use symmwin_device::provider::{Memory, Provider, SharedHandle};

type Imported = Result<Box<dyn Memory>>;

/// One peer's import: done on the caller, or under way on a helper.
enum Import {
    Done(Imported),
    Running(Started<Imported>),
}

/// Import each received handle (`None` at our own rank) as `size` bytes, as
/// `(rank, memory)` pairs in rank order; an error names the peer (the first in rank
/// order that failed). Every import is waited for, up to `limit` each.
pub(crate) fn import_all(
    provider: &Arc<dyn Provider>,
    handles: Vec<Option<SharedHandle>>,
    size: usize,
    limit: Duration,
) -> Result<Vec<(usize, Box<dyn Memory>)>> {
    let handles: Vec<(usize, SharedHandle)> = handles
        .into_iter()
        .enumerate()
        .filter_map(|(rank, handle)| handle.map(|h| (rank, h)))
        .collect();
    let side_by_side = handles.len() > 1;
    let imports: Vec<(usize, Import)> = handles
        .into_iter()
        .map(|(rank, handle)| (rank, start(provider, handle, size, side_by_side)))
        .collect();
    let results: Vec<(usize, Imported)> = imports
        .into_iter()
        .map(|(rank, import)| (rank, finish(import, limit)))
        .collect();
    results
        .into_iter()
        .map(|(rank, result)| result.map(|m| (rank, m)).map_err(|e| e.with_peer(rank)))
        .collect()
}

/// Start importing `handle`: on a helper when `helper`, else (or when no helper
/// thread can be had) here and now.
fn start(provider: &Arc<dyn Provider>, handle: SharedHandle, size: usize, helper: bool) -> Import {
    if !helper {
        return Import::Done(provider.import(handle, size));
    }
    // The job takes the handle from the slot; a job that never starts leaves it there.
    let slot = Arc::new(Mutex::new(Some(handle)));
    let (job_slot, job_provider) = (Arc::clone(&slot), Arc::clone(provider));
    let started = worker::start(move || match take(&job_slot) {
        Some(handle) => job_provider.import(handle, size),
        None => Err(Error::invalid("the handle to import was taken twice")),
    });
    match started {
        Ok(started) => Import::Running(started),
        Err(e) => Import::Done(match take(&slot) {
            Some(handle) => provider.import(handle, size),
            None => Err(e.during(Phase::Import)),
        }),
    }
}

fn take(slot: &Mutex<Option<SharedHandle>>) -> Option<SharedHandle> {
    slot.lock().recover().take()
}

fn finish(import: Import, limit: Duration) -> Imported {
    match import {
        Import::Done(result) => result,
        Import::Running(started) => started.wait_for(limit).unwrap_or_else(|_| {
            Err(Error::new(
                Phase::Import,
                ErrorKind::Internal(format!(
                    "an import did not finish within {}",
                    symmwin_device::text::Seconds(limit)
                )),
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmwin_host::{page_size, HostProvider};

    #[test]
    fn side_by_side_imports_come_back_in_rank_order_and_a_bad_one_names_its_peer() {
        let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
        let size = page_size();
        let memories: Vec<Box<dyn Memory>> =
            (0..3).map(|_| provider.create(size).unwrap()).collect();
        let handles = |bad: Option<usize>| -> Vec<Option<SharedHandle>> {
            (0..4)
                .map(|rank| match rank {
                    1 => None,
                    r if Some(r) == bad => {
                        let file = std::fs::File::open("/dev/null").unwrap();
                        Some(SharedHandle::Fd(file.into()))
                    }
                    r => Some(memories[r.min(2)].export().unwrap()),
                })
                .collect()
        };
        let limit = Duration::from_secs(5);
        let imported = import_all(&provider, handles(None), size, limit).unwrap();
        let ranks: Vec<usize> = imported.iter().map(|(r, _)| *r).collect();
        assert_eq!(ranks, [0, 2, 3]);
        assert!(imported.iter().all(|(_, m)| m.len() == size));
        let err = import_all(&provider, handles(Some(2)), size, limit).unwrap_err();
        assert_eq!(err.peer(), Some(2), "{err}");
    }
}
