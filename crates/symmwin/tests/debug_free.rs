//! `SYMMWIN_DEBUG_FREE=1`: a pointer kept after free faults at its first use. Without
//! it the window cache keeps a freed window mapped (peers may still use it) and later
//! hands it to a new allocation, so the same write lands silently.

mod common;

use std::os::unix::process::ExitStatusExt;

use common::{result, Job};
use symmwin::{Allocation, SignalOptions};

common::worker! { "stale_write" => stale_write, "bounded" => bounded }

/// The quarantine's bound, `SYMMWIN_DEBUG_FREE_KEEP` (this test sets 8).
const KEEP: usize = 8;

/// This process's address space, in kB (`VmSize`): what the quarantine holds. (Not
/// the mapping count: the kernel merges adjacent reserved ranges into one mapping.)
fn address_space_kb() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One rank frees `CYCLES` windows; its address space after the first few hundred
/// and at the end must be about equal (the quarantine holds `KEEP`, not every one). With
/// `STALE_AFTER=n`, it then writes through a pointer kept across its last n frees.
fn bounded(rank: usize, world: usize) -> String {
    const CYCLES: usize = 600;
    let (group, provider) = common::join(rank, world);
    let size = 3 * symmwin::adapter::testing::page_size();
    let cycle = || {
        let alloc = Allocation::new(provider.clone(), size).unwrap();
        let window = group.rendezvous(&alloc).unwrap();
        window.ptr(rank).unwrap()
    };
    for _ in 0..CYCLES / 2 {
        cycle();
    }
    let middle = address_space_kb();
    for _ in CYCLES / 2..CYCLES {
        cycle();
    }
    let end = address_space_kb();
    if let Some(n) = std::env::var("STALE_AFTER")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let stale = cycle();
        for _ in 1..n {
            cycle();
        }
        // SAFETY (of the test): the use after free the mode is for.
        unsafe { (stale as *mut u8).write_volatile(0x5A) };
    }
    format!("middle={middle} end={end}")
}

#[test]
fn the_quarantine_is_bounded_and_a_pointer_kept_across_the_last_n_frees_faults() {
    let env = |extra: Option<(&'static str, String)>| {
        let mut env = vec![
            ("SYMMWIN_DEBUG_FREE", "1".into()),
            ("SYMMWIN_DEBUG_FREE_KEEP", KEEP.to_string()),
            common::one_malloc_arena(),
        ];
        env.extend(extra);
        env
    };
    let outs = Job::new("debug-free-bound").run(1, "bounded", &env(None));
    common::assert_all_success(&outs);
    let got = result(&outs[0]);
    let count = |key: &str| -> usize {
        got.split(' ')
            .find_map(|kv| kv.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    // Unbounded, 300 more frees would have kept 300 more reservations (several MB).
    assert!(
        count("end=") <= count("middle=") + 512,
        "the address space grew (kB) over 300 frees with a bound of {KEEP}: {got}"
    );
    let outs = Job::new("debug-free-last-n").run(
        1,
        "bounded",
        &env(Some(("STALE_AFTER", KEEP.to_string()))),
    );
    assert_eq!(
        outs[0].status.signal(),
        Some(libc::SIGSEGV),
        "a write through a pointer kept across the last {KEEP} frees must fault: {}",
        String::from_utf8_lossy(&outs[0].stdout)
    );
}

/// Both ranks rendezvous and free a window and report whether their next allocation
/// of that size was reused; with `STALE_WRITE=1`, rank 0 then writes through the
/// pointer it kept into its peer's slot.
fn stale_write(rank: usize, world: usize) -> String {
    let (group, provider) = common::join(rank, world);
    let size = 3 * symmwin::adapter::testing::page_size();
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
