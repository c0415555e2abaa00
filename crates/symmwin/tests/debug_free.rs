//! `SYMMWIN_DEBUG_FREE=1`: a pointer kept after free faults at its first use. Without
//! it the window cache keeps a freed window mapped (peers may still use it) and later
//! hands it to a new allocation, so the same write lands silently.

mod common;

use std::os::unix::process::ExitStatusExt;

use common::{result, Job};
use symmwin::{Allocation, SignalOptions};

common::worker! { "stale_write" => stale_write }

/// Both ranks rendezvous and free a window and report whether their next allocation
/// of that size was reused; with `STALE_WRITE=1`, rank 0 then writes through the
/// pointer it kept into its peer's slot.
fn stale_write(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    let size = 3 * symmwin::testing::page_size();
    let alloc = Allocation::new(provider.clone(), size).unwrap();
    let window = group.rendezvous(&alloc).unwrap();
    let stale = window.ptr(1 - rank).unwrap();
    window.barrier(SignalOptions::default()).unwrap();
    drop((window, alloc));
    // A second rendezvous lets the cache release what both ranks freed.
    let other = Allocation::new(provider.clone(), 4096).unwrap();
    let other_window = group.rendezvous(&other).unwrap();
    let again = Allocation::new(provider.clone(), size).unwrap();
    let reused = again.is_reused();
    other_window.barrier(SignalOptions::default()).unwrap();
    if rank == 0 && std::env::var("STALE_WRITE").is_ok() {
        // SAFETY (of the test, not of the code): this is the use after free the mode
        // is for; without it the page is still mapped and the write lands.
        unsafe { (stale as *mut u8).write_volatile(0x5A) };
    }
    other_window.barrier(SignalOptions::default()).unwrap();
    format!("reused={reused}")
}

#[test]
fn a_write_after_free_faults_in_debug_mode_and_lands_without_it() {
    let job = Job::new("debug-free");
    let debug = ("SYMMWIN_DEBUG_FREE", "1".into());
    let short = common::timeout_ms(1000);
    let outs = job.run(
        2,
        "stale_write",
        &[debug, ("STALE_WRITE", "1".into()), short],
    );
    assert_eq!(
        outs[0].status.signal(),
        Some(libc::SIGSEGV),
        "rank 0's write through a freed window must fault: {}",
        String::from_utf8_lossy(&outs[0].stdout)
    );
    let without = Job::new("debug-free-off");
    let outs = without.run(2, "stale_write", &[("STALE_WRITE", "1".into())]);
    common::assert_all_success(&outs);
    assert_eq!(
        result(&outs[0]),
        "reused=true",
        "the cache reuses the window"
    );
}

#[test]
fn debug_mode_never_reuses_a_window() {
    let job = Job::new("debug-free-reuse");
    let outs = job.run(2, "stale_write", &[("SYMMWIN_DEBUG_FREE", "1".into())]);
    common::assert_all_success(&outs);
    for out in &outs {
        assert_eq!(
            result(out),
            "reused=false",
            "a window was reused in debug mode"
        );
    }
}
