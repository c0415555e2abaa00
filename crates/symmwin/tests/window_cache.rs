//! The window cache hands freed memory out again only zeroed, even memory that was
//! taken and put back unused after its user wrote into it.

use std::sync::Arc;

use symmwin::adapter::testing::{nonzero_bytes, page_size};
use symmwin::{
    Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider, SignalOptions,
};

/// Both ranks (threads, each with its own provider) run `step` at once.
fn both<T: Send>(
    groups: &[(Group, Arc<dyn Provider>)],
    step: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|s| {
        let ranks: Vec<_> = (0..groups.len())
            .map(|r| {
                s.spawn({
                    let step = &step;
                    move || step(r)
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A released window comes back zeroed, and one taken but put back unused after
/// its user wrote into it comes back zeroed again.
#[test]
fn released_memory_is_handed_out_zeroed_even_after_an_unused_take() {
    let store = Arc::new(MemoryStore::new());
    let config = Config::from_env().unwrap();
    let groups: Vec<(Group, Arc<dyn Provider>)> = (0..2)
        .map(|rank| {
            let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
            let spec = GroupSpec::new("zeroed-on-release", rank, 2);
            let group = Group::new(spec, store.clone(), provider.clone(), &config).unwrap();
            (group, provider)
        })
        .collect();
    let size = 3 * page_size();
    let rendezvous = |rank: usize, bytes: usize| {
        let (group, provider) = &groups[rank];
        let alloc = Allocation::new(provider.clone(), bytes).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        (alloc, window)
    };
    // Write into every slot, free everywhere, and let a rendezvous release it.
    both(&groups, |r| {
        let (alloc, window) = rendezvous(r, size);
        window.write(1 - r, 0, &vec![0xAB; size]).unwrap();
        window.barrier(SignalOptions::default()).unwrap();
        drop((alloc, window));
    });
    both(&groups, |r| drop(rendezvous(r, page_size())));
    let provider = &groups[0].1;
    let taken = Allocation::new(provider.clone(), size).unwrap();
    assert!(taken.is_reused(), "the released window is handed out");
    // SAFETY: host provider memory.
    assert_eq!(unsafe { nonzero_bytes(&taken) }, 0);
    // SAFETY: the allocation's own mapping, alive while `taken` is.
    unsafe { std::ptr::write_bytes(taken.ptr() as *mut u8, 0xCD, size) };
    drop(taken);
    let again = Allocation::new(provider.clone(), size).unwrap();
    assert!(again.is_reused(), "the unused window was put back");
    // SAFETY: host provider memory.
    let dirty = unsafe { nonzero_bytes(&again) };
    assert_eq!(dirty, 0, "and zeroed again first");
}
