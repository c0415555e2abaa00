//! Bad input: a table of wrong calls, malformed store values, forged or broken
//! handles and bad configuration. Every case must fail with a clear message (checked
//! by text), leak nothing (open fds and mappings unchanged), and leave another live
//! window intact (its data still readable and writable, its barrier still working).
//!
//! The table runs in one worker process, alone, so the fd and mapping counts are its
//! own. Peers are played in-process: a second rank on another thread, or a fake
//! rank 1 that publishes a crafted request and sends crafted handles.
//!
//! This file runs the table; `bad_input/` holds the context every case gets
//! (`context.rs`), the table itself (`cases.rs`), the cases too long for a line of it
//! (`case_helpers.rs`) and the fake rank 1 (`fake_rank.rs`).
//!
//! Run: `cargo test -p symmwin --test bad_input -- --nocapture` (prints every case).

#[path = "bad_input/case_helpers.rs"]
mod case_helpers;
#[path = "bad_input/cases.rs"]
mod cases;
mod common;
#[path = "bad_input/context.rs"]
mod context;
#[path = "bad_input/fake_rank.rs"]
mod fake_rank;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{mappings, open_fds, result, Job};
use symmwin::adapter::testing::Endpoint;
use symmwin::adapter::testing::Namespace;
use symmwin::adapter::testing::Request;
use symmwin::adapter::testing::FABRIC_LEN;
use symmwin::adapter::SharedHandle;
use symmwin::ops::Operand;
use symmwin::ops::Shape;
use symmwin::ops::{ElemType, OpOptions, ReduceOp, Rows, Tile};
use symmwin::SignalOptions;
use symmwin::{
    adapter::Registry, Allocation, Config, Group, GroupSpec, HostProvider, MemoryStore, Provider,
    Store, Window,
};

use case_helpers::*;
use cases::CASES;
use context::*;
use fake_rank::*;

common::worker! {
    "table" => |_, _| table(),
}

#[test]
fn every_bad_input_fails_clearly_leaks_nothing_and_spares_live_windows() {
    let job = Job::new("bad");
    let outs = job.run(
        1,
        "table",
        &[common::timeout_ms(1500), common::one_malloc_arena()],
    );
    common::assert_all_success(&outs);
    let log = String::from_utf8_lossy(&outs[0].stderr);
    eprintln!("{log}");
    let r = result(&outs[0]);
    assert!(r.ends_with("failed=[]"), "{r}");
    let cases: usize = common::field(&r, "cases").parse().unwrap();
    assert!(cases >= 20, "{r}");
    // Cases this machine cannot set up, shown past the harness's capture.
    for case in log.lines().filter_map(|l| l.strip_prefix("skip ")) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIP bad_input {case}");
    }
}

// ------------------------------------------------------------------ the table runner

fn table() -> String {
    let scratch = PathBuf::from(std::env::var("STORE").unwrap()).with_file_name("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
    let config = Config::from_env().unwrap();
    let pair = make_pair(&provider, &config);
    let ctx = Ctx {
        provider,
        config,
        scratch,
        pair,
    };
    // Warm-up: the first threads, rendezvous and sockets create allocator arenas and
    // stack caches that later cases reuse. Count leaks only after that.
    ctx.pair.check(1).unwrap();
    garbage_then_valid(&ctx);
    ctx.pair.check(2).unwrap();
    // The worker pool grows to the most jobs that ever ran at once, and when a case
    // reaches a new most depends on timing (a lane thread not yet back in the pool
    // when the next case's rendezvous starts its imports). Started larger than any
    // case needs, it starts no thread during the table.
    symmwin::adapter::testing::worker::keep_idle(8).unwrap();

    // The leak check has teeth: a forgotten allocation shows in both counts.
    let (fds, maps) = (open_fds(), mappings());
    std::mem::forget(Allocation::new(ctx.provider.clone(), 4096).unwrap());
    assert!(
        open_fds() > fds && mappings() > maps,
        "leak detector is blind"
    );

    let mut failed = Vec::new();
    for (i, (name, case, expect)) in CASES.iter().enumerate() {
        // Freed windows wait in the window cache; flushed, nothing may be left.
        symmwin::adapter::testing::window_cache::flush();
        let (fds, maps) = (open_fds(), mappings());
        let maps_before = std::fs::read_to_string("/proc/self/maps").unwrap();
        let got = case(&ctx);
        if let Some(why) = got.strip_prefix("SKIP ") {
            eprintln!("skip case {i:2} {name}: {why}");
            continue;
        }
        symmwin::adapter::testing::window_cache::flush();
        let (fds1, maps1) = (open_fds(), mappings());
        if maps1 != maps {
            // Show what changed, to tell a leaked span or memfd from allocator noise.
            let maps_after = std::fs::read_to_string("/proc/self/maps").unwrap();
            for l in maps_before.lines().filter(|l| !maps_after.contains(l)) {
                eprintln!("  - {l}");
            }
            for l in maps_after.lines().filter(|l| !maps_before.contains(l)) {
                eprintln!("  + {l}");
            }
        }
        let intact = ctx.pair.check(3 + i as u8);
        let missing: Vec<&&str> = expect.iter().filter(|e| !got.contains(**e)).collect();
        let ok = missing.is_empty() && fds == fds1 && maps == maps1 && intact.is_ok();
        eprintln!(
            "{} case {i:2} {name}: {got}{}",
            if ok { "ok  " } else { "FAIL" },
            if ok {
                String::new()
            } else {
                format!(" | missing {missing:?} fds {fds}->{fds1} maps {maps}->{maps1} {intact:?}")
            }
        );
        if !ok {
            failed.push(*name);
        }
    }
    format!("cases={} failed={failed:?}", CASES.len())
}

/// The error text of a call that must fail.
fn err<T>(r: symmwin::Result<T>) -> String {
    match r {
        Ok(_) => "UNEXPECTED SUCCESS".into(),
        Err(e) => {
            let peer = e.peer().map(|p| format!(" (peer={p})")).unwrap_or_default();
            format!("{e}{peer}")
        }
    }
}

/// A world-1 group of its own, for cases that need one.
fn solo(ctx: &Ctx) -> Group {
    group(ctx, Arc::new(MemoryStore::new()), "solo", 0, 1)
}
