//! Exporting an allocation's shareable handle ahead of the rendezvous that needs it.
//!
//! Allocation is local and rendezvous is collective, and torch calls them separately
//! (`alloc`, then `rendezvous`). Exporting costs about as much as creating the memory
//! (over a millisecond for 64 MiB on CUDA), so it starts on the runtime's worker ([`crate::worker`]) as soon as
//! the memory exists and runs while the allocation maps and zeroes its local view and
//! while the caller goes on to the rendezvous, which then only collects the handle.

use std::sync::{Arc, Condvar, Mutex};
use symmwin_device::lock::Recover;

use symmwin_device::error::Result;
use symmwin_device::provider::{Memory, SharedHandle};

/// A handle being exported in the background. Dropping it unused waits for the
/// export and closes the handle, so a failed or freed allocation leaves no fd behind.
#[derive(Debug)]
pub(crate) struct ExportAhead {
    slot: Arc<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Running,
    Done(Result<SharedHandle>),
    Taken,
}

impl ExportAhead {
    /// Start exporting `memory`; runs inline when no worker thread can be had.
    pub(crate) fn start(memory: Arc<dyn Memory>) -> Self {
        let slot = Arc::new(Slot::default());
        let done = Arc::clone(&slot);
        let job = move || {
            let result = memory.export();
            // The memory goes before the waiter wakes: a waiter that frees the
            // allocation next must find it released, not held by this job.
            drop(memory);
            *done.state.lock().recover() = State::Done(result);
            done.ready.notify_all();
        };
        crate::worker::in_background(job);
        ExportAhead { slot }
    }

    /// Whether the export has finished (its result waits to be taken).
    pub(crate) fn is_ready(&self) -> bool {
        let state = self.slot.state.lock().recover();
        !matches!(*state, State::Running)
    }

    /// The exported handle (or the export's error), waiting for the worker if needed.
    pub(crate) fn wait(self) -> Result<SharedHandle> {
        self.take().unwrap_or_else(|| {
            Err(symmwin_device::error::Error::invalid(
                "an exported handle was taken twice",
            ))
        })
    }

    /// The finished export, once; `None` after it was taken.
    fn take(&self) -> Option<Result<SharedHandle>> {
        let mut state = self.slot.state.lock().recover();
        while matches!(*state, State::Running) {
            state = self.slot.ready.wait(state).recover();
        }
        match std::mem::replace(&mut *state, State::Taken) {
            State::Done(result) => Some(result),
            State::Running | State::Taken => None,
        }
    }
}

impl Drop for ExportAhead {
    fn drop(&mut self) {
        drop(self.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmwin_device::provider::Provider;
    use symmwin_host::HostProvider;

    #[test]
    fn handle_exported_ahead_refers_to_the_same_memory() {
        let provider = HostProvider::new();
        let size = symmwin_host::page_size();
        let memory: Arc<dyn Memory> = Arc::from(provider.create(size).unwrap());
        let handles: Vec<SharedHandle> = (0..4)
            .map(|_| ExportAhead::start(Arc::clone(&memory)))
            .map(|ahead| ahead.wait().unwrap())
            .collect();
        let mut span = provider.reserve(5 * size).unwrap();
        span.map(0, memory.as_ref()).unwrap();
        for (i, handle) in handles.into_iter().enumerate() {
            let imported = provider.import(handle, size).unwrap();
            span.map((i + 1) * size, imported.as_ref()).unwrap();
        }
        // SAFETY: all five pages of the span are mapped read/write.
        unsafe {
            let base = span.base() as *mut u8;
            base.write_volatile(7);
            for i in 1..5 {
                assert_eq!(base.add(i * size).read_volatile(), 7, "import {i}");
            }
        }
    }
}
