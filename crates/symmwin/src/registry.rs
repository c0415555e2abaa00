//! Process-wide bookkeeping for adapters (the C ABI, torch): which pointer belongs
//! to which allocation (and the group it was made for), which groups exist, and
//! which windows were already made.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use symmwin_device::lock::Recover;

use crate::allocation::Allocation;
use crate::group::Group;
use crate::window::Window;
use symmwin_device::error::{Error, Result};
use symmwin_device::provider::Provider;

/// A window slot: filled by the first rendezvous of an (allocation, group); a second
/// caller waits on the slot's lock for the first instead of running a collective.
type WindowSlot = Arc<Mutex<Option<Window>>>;

/// Which group object a window belongs to: its shared state's address, which cannot
/// be reused while a cached window (which holds that state) exists.
type GroupKey = usize;

/// A live allocation and the name of the group it was made for, if any (torch's
/// `empty_strided_p2p(group_name=...)`), so that a later rendezvous without a group
/// finds it.
struct Entry {
    alloc: Allocation,
    group: Option<String>,
}

/// Allocations by address, groups by (name, device) with the identity of the store
/// they were made for, windows by (allocation, group object).
#[derive(Default)]
pub struct Registry {
    allocations: Mutex<BTreeMap<usize, Entry>>,
    groups: Mutex<HashMap<(String, i32), (Group, u64)>>,
    windows: Mutex<HashMap<(u64, GroupKey), WindowSlot>>,
}

/// The entry whose allocation covers `ptr`, and `ptr`'s offset in it.
fn covering(allocations: &BTreeMap<usize, Entry>, ptr: usize) -> Option<(&Entry, usize)> {
    let (_, entry) = allocations.range(..=ptr).next_back()?;
    Some((entry, entry.alloc.offset_of(ptr)?))
}

fn group_key(group: &Group) -> GroupKey {
    Arc::as_ptr(&group.shared) as usize
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Allocate `size` zero-filled bytes; the address of the local view.
    pub fn alloc(&self, provider: Arc<dyn Provider>, size: usize) -> Result<usize> {
        self.alloc_for_group(provider, size, None)
    }

    /// [`Registry::alloc`], remembering that the allocation is for group `group`
    /// ([`Registry::group_of`] answers it for every pointer inside).
    pub fn alloc_for_group(
        &self,
        provider: Arc<dyn Provider>,
        size: usize,
        group: Option<&str>,
    ) -> Result<usize> {
        let alloc = Allocation::new(provider, size)?;
        let ptr = alloc.ptr();
        let group = group.map(str::to_owned);
        self.allocations
            .lock()
            .recover()
            .insert(ptr, Entry { alloc, group });
        Ok(ptr)
    }

    /// The name of the group the allocation covering `ptr` was made for; `None` when
    /// `ptr` is in no live allocation or it was made for no group.
    pub fn group_of(&self, ptr: usize) -> Option<String> {
        let allocations = self.allocations.lock().recover();
        covering(&allocations, ptr)?.0.group.clone()
    }

    /// Forget the allocation that starts at `ptr` and the windows cached for it.
    /// Windows still held elsewhere stay mapped.
    pub fn free(&self, ptr: usize) -> Result<()> {
        let Entry { alloc, .. } = self
            .allocations
            .lock()
            .recover()
            .remove(&ptr)
            .ok_or_else(|| Error::invalid(format!("{ptr:#x} is not a live symmwin allocation")))?;
        self.windows
            .lock()
            .recover()
            .retain(|(id, _), _| *id != alloc.id());
        Ok(())
    }

    /// The allocation covering `ptr` and the offset of `ptr` in it.
    pub fn find(&self, ptr: usize) -> Option<(Allocation, usize)> {
        let allocations = self.allocations.lock().recover();
        let (entry, offset) = covering(&allocations, ptr)?;
        Some((entry.alloc.clone(), offset))
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> usize {
        self.allocations.lock().recover().len()
    }

    /// The group registered as `name` on `device`, if any.
    pub fn group(&self, name: &str, device: i32) -> Option<Group> {
        self.groups
            .lock()
            .recover()
            .get(&(name.to_owned(), device))
            .map(|(g, _)| g.clone())
    }

    /// True when group `name` on `device` is registered for the store `store_id`.
    pub fn has_group_for(&self, name: &str, device: i32, store_id: u64) -> bool {
        self.groups
            .lock()
            .recover()
            .get(&(name.to_owned(), device))
            .is_some_and(|(_, id)| *id == store_id)
    }

    /// The group `name` on `device` made for the store whose identity is `store_id`,
    /// created with `make` on first use. A group registered under that name for
    /// another store (the process group was destroyed and a new one took its name)
    /// is released and replaced: its windows stay valid, no new rendezvous uses it.
    pub fn group_or_insert(
        &self,
        name: &str,
        device: i32,
        store_id: u64,
        make: impl FnOnce() -> Result<Group>,
    ) -> Result<Group> {
        let mut groups = self.groups.lock().recover();
        let key = (name.to_owned(), device);
        if let Some((g, id)) = groups.get(&key) {
            if *id == store_id {
                return Ok(g.clone());
            }
        }
        let group = make()?;
        if let Some((old, _)) = groups.insert(key, (group.clone(), store_id)) {
            old.shared.store.release();
        }
        Ok(group)
    }

    /// Forget group `name` (every group when `None`) on every device and release
    /// its store: the process group it was made for is gone. Windows made on it stay
    /// valid; its socket goes with the last of them. The number of groups released.
    pub fn release_groups(&self, name: Option<&str>) -> usize {
        let mut released = Vec::new();
        self.groups.lock().recover().retain(|(n, _), (g, _)| {
            let keep = name.is_some_and(|name| name != n);
            if !keep {
                released.push(g.clone());
            }
            keep
        });
        for group in &released {
            group.shared.store.release();
            let key = group_key(group);
            self.windows.lock().recover().retain(|(_, g), _| *g != key);
        }
        released.len()
    }

    /// The window already made for the allocation covering `ptr` on group `name` of
    /// `device`, and `ptr`'s offset in it; never collective (for one-sided ops, which
    /// must not start a rendezvous that only one rank joins). A rendezvous of that
    /// window still running in another thread is waited for.
    pub fn existing_window(&self, ptr: usize, name: &str, device: i32) -> Option<(Window, usize)> {
        let (alloc, offset) = self.find(ptr)?;
        let group = self.group(name, device)?;
        let slot = Arc::clone(
            self.windows
                .lock()
                .recover()
                .get(&(alloc.id(), group_key(&group)))?,
        );
        let window = slot.lock().recover().as_ref()?.clone();
        Some((window, offset))
    }

    /// Window of the allocation covering `ptr` on `group`, and `ptr`'s offset in it.
    /// `Ok(None)` when `ptr` is not ours (counted on the group, so that a peer that
    /// did take part is told which rank skipped). Cached: a later call is not
    /// collective, and a concurrent one waits for the first and gets its window.
    pub fn rendezvous(
        &self,
        ptr: usize,
        group: &Group,
        pad_size: usize,
    ) -> Result<Option<(Window, usize)>> {
        let Some((alloc, offset)) = self.find(ptr) else {
            group.note_foreign_rendezvous();
            return Ok(None);
        };
        let slot = Arc::clone(
            self.windows
                .lock()
                .recover()
                .entry((alloc.id(), group_key(group)))
                .or_default(),
        );
        let mut slot = slot.lock().recover();
        if let Some(w) = slot.as_ref() {
            // A cached window skips the provider; a lost device context must still show.
            w.check_errors()?;
            // A poisoned window is never handed out again as if it were fine.
            w.check_poison()?;
            return Ok(Some((w.clone(), offset)));
        }
        let window = group.rendezvous_with_pads(&alloc, pad_size)?;
        *slot = Some(window.clone());
        Ok(Some((window, offset)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmwin_host::HostProvider;

    #[test]
    fn an_allocation_remembers_its_group_until_it_is_freed() {
        let registry = Registry::new();
        let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
        let size = 3 * symmwin_host::page_size();
        let named = registry
            .alloc_for_group(Arc::clone(&provider), size, Some("tp"))
            .unwrap();
        let plain = registry.alloc(provider, size).unwrap();
        assert_eq!(registry.group_of(named).as_deref(), Some("tp"));
        assert_eq!(registry.group_of(named + size - 1).as_deref(), Some("tp"));
        assert_eq!(registry.group_of(named + size), None, "one past the end");
        assert_eq!(registry.group_of(plain), None, "made for no group");
        registry.free(named).unwrap();
        assert_eq!(registry.group_of(named), None, "freed");
        assert!(registry.find(plain).is_some());
    }
}
