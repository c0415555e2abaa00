//! One rank of `demo` or `bench`: joins the group through the launch's file store.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;
use symmwin::{Allocation, Config, FileStore, Group, GroupSpec, Provider, Window};
use symmwin::{SignalOptions, Stream};

use crate::failure::Failure;
use crate::ProviderChoice;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Task {
    Demo,
    BenchRendezvous,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[arg(long, value_enum)]
    pub task: Task,
    #[arg(long)]
    pub rank: usize,
    #[arg(long)]
    pub world: usize,
    #[arg(long)]
    pub store: std::path::PathBuf,
    #[arg(long, value_enum)]
    pub provider: ProviderChoice,
    /// Bytes per peer (demo) or comma-separated window sizes (bench).
    #[arg(long)]
    pub sizes: String,
    #[arg(long, default_value_t = 10)]
    pub iters: usize,
    /// bench: keep every window of a size alive until the size is done.
    #[arg(long)]
    pub fresh: bool,
}

/// The command line of one rank of `task` ("demo" or "bench-rendezvous").
pub fn args(
    task: &str,
    rank: usize,
    world: usize,
    store: &crate::launch::StoreDir,
    provider: ProviderChoice,
    sizes: &str,
    iters: usize,
) -> Vec<String> {
    [
        "--task",
        task,
        "--rank",
        &rank.to_string(),
        "--world",
        &world.to_string(),
        "--store",
        &store.0.display().to_string(),
        "--provider",
        provider.name(),
        "--sizes",
        sizes,
        "--iters",
        &iters.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Test hook, for the supervisor's tests only: the demo rank named here leaves after
/// its first round, cleanly and without a result, as a rank that exits 0 early would.
pub const LEAVE_EARLY_HOOK: &str = "SYMMWIN_CLI_TEST_LEAVE_EARLY";

fn leaves_early(rank: usize) -> bool {
    std::env::var(LEAVE_EARLY_HOOK)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        == Some(rank)
}

pub fn run(args: WorkerArgs) -> Result<ExitCode, Failure> {
    let config = Config::from_env()?;
    let provider = make_provider(args.provider, args.rank, &config)?;
    let store = Arc::new(FileStore::new(&args.store)?);
    let group = Group::new(
        GroupSpec::new("world", args.rank, args.world),
        store,
        provider.clone(),
        &config,
    )?;
    let sizes = args
        .sizes
        .split(',')
        .map(crate::parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    let leave_early = matches!(args.task, Task::Demo) && leaves_early(args.rank);
    let result = match args.task {
        Task::Demo if leave_early => demo(&group, &provider, sizes[0], 1),
        Task::Demo => demo(&group, &provider, sizes[0], args.iters),
        Task::BenchRendezvous => {
            bench_rendezvous(&group, &provider, &sizes, args.iters, args.fresh)
        }
    }?;
    if leave_early {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}",
        json!({"event": "result", "rank": args.rank, "data": result})
    );
    Ok(ExitCode::SUCCESS)
}

/// The provider a rank uses: CUDA device `rank % devices`, or host memory.
pub fn make_provider(
    choice: ProviderChoice,
    rank: usize,
    config: &Config,
) -> symmwin::Result<Arc<dyn Provider>> {
    let cuda_devices = || symmwin::adapter::cuda_device_count().unwrap_or(0);
    let host = -1;
    match choice {
        ProviderChoice::Host => symmwin::adapter::provider_for_device(host, config.handle),
        ProviderChoice::Auto if cuda_devices() == 0 => {
            symmwin::adapter::provider_for_device(host, config.handle)
        }
        ProviderChoice::Auto | ProviderChoice::Cuda => {
            let n = symmwin::adapter::cuda_device_count()?;
            if n == 0 {
                return Err(symmwin::Error::new(
                    symmwin::Phase::Probe,
                    symmwin::ErrorKind::NoDriver("no CUDA device".into()),
                ));
            }
            symmwin::adapter::provider_for_device((rank % n as usize) as i32, config.handle)
        }
    }
}

fn progress(done: usize, total: usize) {
    println!(
        "{}",
        json!({"event": "progress", "done": done, "total": total})
    );
}

/// Word `k` of the chunk rank `src` sends to rank `dst` in iteration `iter`.
fn pattern_word(src: usize, dst: usize, iter: usize, k: usize) -> u64 {
    let seed = ((src as u64) << 48) ^ ((dst as u64) << 32) ^ ((iter as u64) << 16);
    (seed ^ k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed
}

fn pattern(src: usize, dst: usize, iter: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for k in 0..len.div_ceil(8) {
        out.extend_from_slice(&pattern_word(src, dst, iter, k).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The bytes wrong in the chunk `rank` received from `src` in round `iter`, and a line
/// saying what they look like; None when every byte is right.
fn check_chunk(received: &[u8], src: usize, rank: usize, iter: usize) -> Option<(usize, String)> {
    let chunk = received.len();
    let expected = pattern(src, rank, iter, chunk);
    let bad = received
        .iter()
        .zip(&expected)
        .filter(|(a, b)| a != b)
        .count();
    if bad == 0 {
        return None;
    }
    let first = received
        .iter()
        .zip(&expected)
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let stale = iter > 0 && received == pattern(src, rank, iter - 1, chunk);
    let zeros = received.iter().all(|&b| b == 0);
    let what = if zeros {
        " (all zero: never arrived)"
    } else if stale {
        " (previous round's data)"
    } else {
        ""
    };
    Some((
        bad,
        format!("iter {iter} from rank {src}: {bad} bytes wrong, first at {first}{what}"),
    ))
}

/// All-to-all: each rank's slot is `[send: world chunks | recv: world chunks]`; rank r
/// copies send chunk p into rank p's recv chunk r, then every byte is checked.
fn demo(
    group: &Group,
    provider: &Arc<dyn Provider>,
    chunk: usize,
    iters: usize,
) -> symmwin::Result<serde_json::Value> {
    let (rank, world) = (group.rank(), group.world());
    let recv_base = chunk * world;
    let t0 = Instant::now();
    let alloc = Allocation::new(provider.clone(), 2 * chunk * world)?;
    let window = group.rendezvous(&alloc)?;
    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut push_s = Vec::with_capacity(iters);
    let mut mismatched_bytes = 0usize;
    let mut failures: Vec<String> = Vec::new();
    let mut received = vec![0u8; chunk];
    // Fault every page of our slot in now, untimed: the pushes then measure the copy,
    // not the kernel handing out pages (zeroing between rounds keeps them in memory).
    for at in 0..2 * world {
        window.write(rank, at * chunk, &received)?;
    }
    for iter in 0..iters {
        window.zero_own(recv_base, chunk * world)?;
        for peer in 0..world {
            window.write(rank, peer * chunk, &pattern(rank, peer, iter, chunk))?;
        }
        // Nobody pushes before every rank has cleared its receive area.
        window.barrier(SignalOptions::default())?;
        window.synchronize(Stream::DEFAULT)?;
        let start = Instant::now();
        for step in 0..world {
            // Stagger destinations so ranks do not all hit the same peer at once.
            let peer = (rank + step) % world;
            window.copy(
                (peer, recv_base + rank * chunk),
                (rank, peer * chunk),
                chunk,
            )?;
        }
        // Nobody reads before every rank's pushes have landed.
        window.barrier(SignalOptions::default())?;
        window.synchronize(Stream::DEFAULT)?;
        push_s.push(start.elapsed().as_secs_f64());
        for src in 0..world {
            window.read(rank, recv_base + src * chunk, &mut received)?;
            if let Some((bad, failure)) = check_chunk(&received, src, rank, iter) {
                mismatched_bytes += bad;
                failures.push(failure);
            }
        }
        progress(iter + 1, iters);
    }
    let mut sorted = push_s.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let leaving = (chunk * (world - 1)) as f64;
    drop(window);
    Ok(json!({
        "setup_ms": setup_ms,
        "push_median_us": median * 1e6,
        "gbps": leaving / median / 1e9,
        "gbps_min": leaving / sorted.last().copied().unwrap_or(f64::NAN) / 1e9,
        "gbps_max": leaving / sorted.first().copied().unwrap_or(f64::NAN) / 1e9,
        "mismatched_bytes": mismatched_bytes,
        "failures": failures,
        "verified_bytes": chunk * world * iters,
        "handle_type": provider.info().handle_type.to_string(),
        "device": provider.info().device,
    }))
}

/// Alloc + rendezvous + free, `iters` times per size, with the phase split. With
/// `fresh`, windows are freed only once their size is done, so that every one is new
/// memory (free time is then not measured).
fn bench_rendezvous(
    group: &Group,
    provider: &Arc<dyn Provider>,
    sizes: &[usize],
    iters: usize,
    fresh: bool,
) -> symmwin::Result<serde_json::Value> {
    // A small window whose barrier lines the ranks up before each timed rendezvous.
    let sync_alloc = Allocation::new(provider.clone(), 4096)?;
    let sync: Window = group.rendezvous(&sync_alloc)?;
    let mut rows = Vec::new();
    let total = sizes.len() * (iters + 1);
    let mut done = 0;
    let mut wrong = 0;
    for &size in sizes {
        let mut samples = Vec::new();
        let mut kept = Vec::new();
        // One extra, untimed round warms up the pad pool and the driver.
        for i in 0..=iters {
            sync.barrier(SignalOptions::default())?;
            sync.synchronize(Stream::DEFAULT)?;
            let traffic = (group.store_ops(), group.exchange_counts().sent);
            let t0 = Instant::now();
            let alloc = Allocation::new(provider.clone(), size)?;
            let create_us = t0.elapsed().as_secs_f64() * 1e6;
            let (window, phases) = group.rendezvous_timed(&alloc, symmwin::DEFAULT_PAD_SIZE)?;
            let total_us = t0.elapsed().as_secs_f64() * 1e6;
            let store_ops = group.store_ops() - traffic.0;
            let messages = group.exchange_counts().sent - traffic.1;
            wrong += check_window(&window, &sync, i)?;
            let t1 = Instant::now();
            let free_us = if fresh {
                kept.push((window, alloc));
                f64::NAN
            } else {
                drop(window);
                drop(alloc);
                t1.elapsed().as_secs_f64() * 1e6
            };
            if i > 0 {
                samples.push(json!({
                    "create_us": create_us, "total_us": total_us, "free_us": free_us,
                    "phases": phases, "store_ops": store_ops, "messages": messages,
                }));
            }
            done += 1;
            progress(done, total);
        }
        rows.push(json!({"size": size, "samples": samples}));
    }
    Ok(json!({"rows": rows, "pad_pools": group.pad_pool_count(), "wrong": wrong}))
}

/// Untimed: the new window reads as zeros at both ends of our slot, and a byte
/// written into the middle of the next rank's slot arrives. The number of failures.
fn check_window(window: &Window, sync: &Window, round: usize) -> symmwin::Result<usize> {
    let (rank, world, size) = (window.rank(), window.world(), window.size());
    let mut ends = [0xFFu8; 2];
    window.read(rank, 0, &mut ends[..1])?;
    window.read(rank, size - 1, &mut ends[1..])?;
    let tag = (round % 251) as u8 + 1;
    window.write((rank + 1) % world, size / 2, &[tag])?;
    sync.barrier(SignalOptions::channel(1))?;
    sync.synchronize(Stream::DEFAULT)?;
    let mut got = [0u8];
    window.read(rank, size / 2, &mut got)?;
    Ok(usize::from(ends != [0, 0]) + usize::from(got[0] != tag))
}
