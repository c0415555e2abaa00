//! Process-wide bookkeeping for adapters (the C ABI, torch): which pointer belongs
//! to which allocation, which groups exist, and which windows were already made.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::allocation::Allocation;
use crate::error::{Error, Result};
use crate::group::Group;
use crate::provider::Provider;
use crate::window::Window;

/// Allocations by address, groups by (name, device), windows by (allocation, group).
#[derive(Default)]
pub struct Registry {
    allocations: Mutex<BTreeMap<usize, Allocation>>,
    groups: Mutex<HashMap<(String, i32), Group>>,
    windows: Mutex<HashMap<(u64, String), Window>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps stay consistent even if a holder panicked: every update is one insert
    // or remove.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Allocate `size` zero-filled bytes; the address of the local view.
    pub fn alloc(&self, provider: Arc<dyn Provider>, size: usize) -> Result<usize> {
        let alloc = Allocation::new(provider, size)?;
        let ptr = alloc.ptr();
        lock(&self.allocations).insert(ptr, alloc);
        Ok(ptr)
    }

    /// Forget the allocation that starts at `ptr` and the windows cached for it.
    /// Windows still held elsewhere stay mapped.
    pub fn free(&self, ptr: usize) -> Result<()> {
        let alloc = lock(&self.allocations)
            .remove(&ptr)
            .ok_or_else(|| Error::invalid(format!("{ptr:#x} is not a live symmwin allocation")))?;
        lock(&self.windows).retain(|(id, _), _| *id != alloc.id());
        Ok(())
    }

    /// The allocation covering `ptr` and the offset of `ptr` in it.
    pub fn find(&self, ptr: usize) -> Option<(Allocation, usize)> {
        let allocations = lock(&self.allocations);
        let (_, alloc) = allocations.range(..=ptr).next_back()?;
        let offset = alloc.offset_of(ptr)?;
        Some((alloc.clone(), offset))
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> usize {
        lock(&self.allocations).len()
    }

    /// The group registered as `name` on `device`, if any.
    pub fn group(&self, name: &str, device: i32) -> Option<Group> {
        lock(&self.groups).get(&(name.to_owned(), device)).cloned()
    }

    /// The group `name` on `device`, created with `make` on first use.
    pub fn group_or_insert(
        &self,
        name: &str,
        device: i32,
        make: impl FnOnce() -> Result<Group>,
    ) -> Result<Group> {
        let mut groups = lock(&self.groups);
        if let Some(g) = groups.get(&(name.to_owned(), device)) {
            return Ok(g.clone());
        }
        let group = make()?;
        groups.insert((name.to_owned(), device), group.clone());
        Ok(group)
    }

    /// The window already made for the allocation covering `ptr` on group `name`,
    /// and `ptr`'s offset in it; never collective (for one-sided ops, which must not
    /// start a rendezvous that only one rank joins).
    pub fn existing_window(&self, ptr: usize, name: &str) -> Option<(Window, usize)> {
        let (alloc, offset) = self.find(ptr)?;
        let window = lock(&self.windows)
            .get(&(alloc.id(), name.to_owned()))?
            .clone();
        Some((window, offset))
    }

    /// Window of the allocation covering `ptr` on `group`, and `ptr`'s offset in it.
    /// `Ok(None)` when `ptr` is not ours. Cached: a second call is not collective.
    pub fn rendezvous(
        &self,
        ptr: usize,
        group: &Group,
        pad_size: usize,
    ) -> Result<Option<(Window, usize)>> {
        let Some((alloc, offset)) = self.find(ptr) else {
            return Ok(None);
        };
        let key = (alloc.id(), group.name().to_owned());
        if let Some(w) = lock(&self.windows).get(&key) {
            // A cached window skips the provider; a lost device context must still show.
            w.check_errors()?;
            return Ok(Some((w.clone(), offset)));
        }
        let window = group.rendezvous_with_pads(&alloc, pad_size)?;
        lock(&self.windows).insert(key, window.clone());
        Ok(Some((window, offset)))
    }
}
