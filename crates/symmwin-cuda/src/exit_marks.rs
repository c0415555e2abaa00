//! The device's view of which peers have ended: per group, one u32 per rank in pinned
//! host memory mapped into the device (0 while the rank's process lives or is not
//! watched, else its pid), written by the peer watcher's thread (`peer_watch.rs`) and
//! read by a waiting kernel after a spin budget (`spin_for_peer` in `kernels/wait.cuh`),
//! so a device wait for a dead peer ends within a millisecond of the watcher seeing it.
//!
//! Arrays are never given back to the driver while the provider lives: a kernel still
//! queued for a group that is gone may read its array, and freeing pinned memory under
//! it would fault. A group's array is reused, zeroed, for a later group once the first
//! group's peer set is no longer registered; a stale kernel of the old group reading
//! it then sees only marks of the new one (a group destroyed under its own running
//! kernels is a program error in any case).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use symmwin_device::lock::Recover;

use super::context::PrimaryContext;
use super::driver::DriverError;
use super::pinned::Pinned;
use symmwin_device::peer_watch::{ExitMarks, PeerSet};

/// Ranks a group's marks hold: every world the kernels support (signals.rs asserts it).
pub(super) const RANKS: usize = 1024;

/// One group's marks, one word per rank.
struct MarkArray(Pinned<[AtomicU32; RANKS]>);

impl MarkArray {
    fn clear(&self) {
        self.0
            .get()
            .iter()
            .for_each(|w| w.store(0, Ordering::Relaxed));
    }
}

impl ExitMarks for MarkArray {
    fn mark(&self, rank: usize, pid: u32) {
        if let Some(word) = self.0.get().get(rank) {
            word.store(pid, Ordering::Release);
        }
    }
}

/// The marks of every group of one device that has launched a waiting kernel.
#[derive(Default)]
pub(super) struct DeviceExitMarks {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    by_set: HashMap<PeerSet, Arc<MarkArray>>,
    spare: Vec<Arc<MarkArray>>,
}

impl std::fmt::Debug for DeviceExitMarks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("DeviceExitMarks")
            .field("groups", &state.by_set.len())
            .field("spare", &state.spare.len())
            .finish()
    }
}

impl DeviceExitMarks {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().recover()
    }

    /// The device address of `peers`' marks, allocated (and attached to the watcher) on
    /// a group's first waiting launch; 0 when the group watches no peers, so its waits
    /// never look. The steady state is one map lookup under a mutex.
    pub(super) fn address(
        &self,
        ctx: &Arc<PrimaryContext>,
        peers: PeerSet,
    ) -> Result<u64, DriverError> {
        if peers == PeerSet::NONE {
            return Ok(0);
        }
        let mut state = self.lock();
        if let Some(marks) = state.by_set.get(&peers) {
            return Ok(marks.0.device);
        }
        state.retire_gone_groups();
        let marks = match state.spare.pop() {
            Some(marks) => marks,
            None => Arc::new(MarkArray(Pinned::new(
                ctx,
                std::array::from_fn(|_| AtomicU32::new(0)),
                "freeing a group's exit marks",
            )?)),
        };
        if !peers.attach_marks(Arc::clone(&marks) as Arc<dyn ExitMarks>) {
            // The group is gone already: nothing will mark the array.
            state.spare.push(marks);
            return Ok(0);
        }
        let device = marks.0.device;
        state.by_set.insert(peers, marks);
        Ok(device)
    }
}

impl State {
    /// Arrays of groups that are gone become spares: a registered set's table holds a
    /// reference to its array, so one that only this map holds can get no more marks.
    fn retire_gone_groups(&mut self) {
        let gone: Vec<PeerSet> = self
            .by_set
            .iter()
            .filter(|(_, marks)| Arc::strong_count(marks) == 1)
            .map(|(set, _)| *set)
            .collect();
        for set in gone {
            if let Some(marks) = self.by_set.remove(&set) {
                marks.clear();
                self.spare.push(marks);
            }
        }
    }
}
