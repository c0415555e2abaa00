//! The pointer contract torch's backends keep and real programs check (vLLM compares
//! `get_buffer(rank).data_ptr()` with the tensor's address): the own entry of a
//! window's pointers is the address its allocation was made at, so own entry + offset
//! is the pointer given to rendezvous; the peers' entries are their slots of the flat
//! span, `base + r * stride`; the own slot of the span is a second mapping of the own
//! memory and stays mapped. Ranks run as threads of one process on the host provider.

mod common;

use std::sync::Arc;

use common::hosts::spanning;
use symmwin::{adapter::Registry, Allocation, Group, Provider, SignalOptions, Window};

/// Rank `rank`'s window of a fresh allocation of `size` bytes whose first byte is
/// `rank + 1`, written through the allocation's own view before the rendezvous.
fn stamped_window(rank: usize, group: &Group, size: usize) -> (Allocation, Window) {
    let alloc = Allocation::new(group.provider().clone(), size).unwrap();
    // SAFETY: (test) the allocation maps `size` writable bytes at `ptr()` while it lives.
    unsafe { *(alloc.ptr() as *mut u8) = rank as u8 + 1 };
    let window = group.rendezvous(&alloc).unwrap();
    (alloc, window)
}

fn read_u8(addr: usize) -> u8 {
    // SAFETY: (test) every address read is inside a live mapping of a window or an
    // allocation of the calling test.
    unsafe { std::ptr::read_volatile(addr as *const u8) }
}

#[test]
fn the_own_entry_is_the_allocation_and_peers_are_their_slots_at_world_1_to_8() {
    for world in [1, 2, 4, 8] {
        let hosts = vec!["h"; world];
        let seen = spanning(&format!("pw{world}"), &hosts, None, |rank, group| {
            let (alloc, window) = stamped_window(rank, &group, 4096);
            let layout = window.layout();
            let (ptrs, slots) = (window.ptrs(), window.slots());
            assert_eq!(
                ptrs[rank],
                alloc.ptr(),
                "world {world} rank {rank}: own entry"
            );
            assert_eq!(window.local_ptr(), alloc.ptr());
            assert_eq!(window.ptr(rank).unwrap(), alloc.ptr());
            for r in 0..world {
                let slot = layout.base + r * layout.stride;
                assert_eq!(slots[r], slot, "world {world} rank {rank}: slot {r}");
                assert_eq!(window.slot(r).unwrap(), slot);
                if r != rank {
                    assert_eq!(ptrs[r], slot, "world {world} rank {rank}: peer {r}");
                }
            }
            assert_ne!(slots[rank], alloc.ptr(), "the own slot is a second mapping");
            // Both addresses of the own memory show the byte written through one of
            // them, and every peer's slot shows what that peer wrote.
            assert_eq!(read_u8(slots[rank]), rank as u8 + 1);
            window.barrier(SignalOptions::default()).unwrap();
            let peers: Vec<u8> = ptrs.iter().map(|&p| read_u8(p)).collect();
            window.barrier(SignalOptions::default()).unwrap();
            peers
        });
        let want: Vec<u8> = (1..=world as u8).collect();
        for (rank, peers) in seen.into_iter().enumerate() {
            assert_eq!(peers, want, "world {world} rank {rank}");
        }
    }
}

#[test]
fn an_interior_pointer_is_found_at_the_own_entry_plus_its_offset() {
    // What torch's MemPool hands out: tensors inside one allocation of the backend's.
    let seen = spanning("pin", &["h", "h"], None, |rank, group| {
        let registry = Registry::new();
        let provider: Arc<dyn Provider> = group.provider().clone();
        let base = registry.alloc(provider, 1 << 16).unwrap();
        let mut offsets = Vec::new();
        for interior in [0, 4096, 12_345] {
            let (window, offset) = registry
                .rendezvous(base + interior, &group, symmwin::DEFAULT_PAD_SIZE)
                .unwrap()
                .unwrap();
            let own = window.ptrs()[rank];
            assert_eq!(own, base, "rank {rank}: own entry is the allocation");
            assert_eq!(own + offset, base + interior, "rank {rank}");
            let peer = 1 - rank;
            assert_eq!(window.ptrs()[peer], window.slot(peer).unwrap());
            offsets.push(offset);
        }
        registry.free(base).unwrap();
        offsets
    });
    assert_eq!(seen, vec![vec![0, 4096, 12_345]; 2]);
}

#[test]
fn the_own_memory_stays_mapped_while_a_window_lives_after_its_allocation_is_freed() {
    let seen = spanning("pfree", &["h", "h"], None, |rank, group| {
        let registry = Registry::new();
        let provider: Arc<dyn Provider> = group.provider().clone();
        let base = registry.alloc(provider, 4096).unwrap();
        // SAFETY: (test) 4096 writable bytes at `base` while the allocation is live.
        unsafe { *(base as *mut u8) = 0x40 + rank as u8 };
        let (window, _) = registry
            .rendezvous(base, &group, symmwin::DEFAULT_PAD_SIZE)
            .unwrap()
            .unwrap();
        window.barrier(SignalOptions::default()).unwrap();
        // The tensor goes (torch frees it) while a handle still holds the window: the
        // own entry the handle reported must stay readable, as must the peers'.
        registry.free(base).unwrap();
        let own = read_u8(window.ptrs()[rank]);
        let peer = read_u8(window.ptrs()[1 - rank]);
        window.barrier(SignalOptions::default()).unwrap();
        (own, peer)
    });
    assert_eq!(seen, vec![(0x40, 0x41), (0x41, 0x40)]);
}

#[test]
fn the_device_tables_hold_the_same_pointers_as_the_host_lists() {
    let seen = spanning("ptab", &["h", "h", "h"], None, |rank, group| {
        let (_alloc, window) = stamped_window(rank, &group, 4096);
        let world = window.world();
        let words = |table: usize| -> Vec<usize> {
            // SAFETY: (test) host memory's tables are host arrays of `world` words
            // that live as long as the window.
            let words = unsafe { std::slice::from_raw_parts(table as *const u64, world) };
            words.iter().map(|&w| w as usize).collect()
        };
        let buffers = words(window.ptrs_dev().unwrap());
        let slots = words(window.slots_dev().unwrap());
        assert_eq!(buffers, window.ptrs(), "rank {rank}");
        assert_eq!(slots, window.slots(), "rank {rank}");
        window.barrier(SignalOptions::default()).unwrap();
        (buffers, slots)
    });
    for (rank, (buffers, slots)) in seen.iter().enumerate() {
        let differ: Vec<usize> = (0..3).filter(|&r| buffers[r] != slots[r]).collect();
        assert_eq!(differ, vec![rank], "only the own entry differs");
    }
}

#[test]
fn a_window_taken_over_from_the_cache_reports_the_new_allocation() {
    // World 1: the window cache is per process, and ranks here are threads.
    let seen = spanning("pcache", &["h"], None, |rank, group| {
        let mut owns = Vec::new();
        for round in 0..4 {
            let (alloc, window) = stamped_window(rank, &group, 1 << 20);
            assert_eq!(window.ptrs()[0], alloc.ptr(), "round {round}");
            assert_eq!(read_u8(window.slot(0).unwrap()), 1, "round {round}");
            owns.push(alloc.is_reused());
            drop(window);
            drop(alloc);
        }
        owns
    });
    // Later rounds come back from the cache (when the cache has settled a released
    // window is its business): the path under test was taken.
    assert!(
        seen[0][1..].contains(&true),
        "no round was reused: {seen:?}"
    );
}
