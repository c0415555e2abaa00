//! `symmwin demo`: N processes all-to-all over one window each, every byte verified.

use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};

use crate::failure::Failure;
use crate::launch::{report_endings, run_workers, Launch, StoreDir};
use crate::progress::Progress;
use crate::{human_size, plural, rounded, ProviderChoice};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of ranks (processes).
    #[arg(long, default_value = "2", value_parser = crate::parse_count)]
    pub world: usize,
    /// Bytes each rank sends to each rank (e.g. 4M, 1.5M, 256K).
    #[arg(long, default_value = "4M", value_parser = crate::parse_size)]
    pub size: usize,
    /// Memory to share.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Auto)]
    pub provider: ProviderChoice,
    /// All-to-all rounds (each one verified).
    #[arg(long, default_value = "10", value_parser = crate::parse_count)]
    pub iters: usize,
    /// Print JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DemoArgs) -> Result<ExitCode, Failure> {
    let resolved = crate::setup::check(args.provider)?;
    let host_memory = resolved.used == ProviderChoice::Host;
    crate::preflight::check(
        &crate::preflight::Needs::demo(args.world, args.size, host_memory),
        &format!("world {} x {}", args.world, human_size(args.size)),
    )?;
    let store = StoreDir::new()?;
    let pass_stderr = symmwin::adapter::logging_requested();
    let mut progress = Progress::new(
        "all-to-all rounds",
        args.world,
        args.iters as u64,
        args.json,
    );
    let worker_args = |rank: usize| {
        crate::worker::args(
            "demo",
            rank,
            args.world,
            &store,
            resolved.used,
            &args.size.to_string(),
            args.iters,
        )
    };
    let launch = Launch {
        world: args.world,
        args: &worker_args,
        grace: resolved.grace(),
        pass_stderr,
    };
    let outcomes = run_workers(&launch, &mut progress)?;
    progress.finish();
    let all_ran = report_endings(&outcomes, pass_stderr);
    let results: Vec<(usize, &Value)> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().map(|r| (o.rank, &r["data"])))
        .collect();
    let title = format!(
        "symmwin demo: world {}, {} per peer, {}, provider {}",
        args.world,
        human_size(args.size),
        plural(args.iters, "round"),
        resolved.describe()
    );
    if args.json {
        print_json(&args, &resolved, &results)?;
    } else if !results.is_empty() {
        println!("{title}");
        print_table(&results, args.world);
        println!(
            "(push: the median round's copies; GB/s: the bytes a rank sends to its peers per \
             second of push, with every page faulted in before the first round)"
        );
    }
    for (rank, d) in &results {
        for f in d["failures"].as_array().into_iter().flatten().take(5) {
            eprintln!("rank {rank}: {}", f.as_str().unwrap_or("?"));
        }
    }
    if !all_ran {
        eprintln!("symmwin demo: failed: not every rank finished");
        return Ok(ExitCode::from(crate::failure::EXIT_FAILED));
    }
    let verified = results.len() == args.world
        && results
            .iter()
            .all(|(_, d)| d["mismatched_bytes"].as_u64() == Some(0));
    if verified {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("symmwin demo: verification FAILED");
        Ok(ExitCode::from(crate::failure::EXIT_FAILED))
    }
}

/// Where a rank's memory lives: "host" or "cuda:N".
pub fn device_name(device: &Value) -> String {
    match device.as_i64() {
        Some(d) if d >= 0 => format!("cuda:{d}"),
        _ => "host".into(),
    }
}

fn print_table(results: &[(usize, &Value)], world: usize) {
    let num = |d: &Value, k: &str| d[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:>4}  {:<7}  {:<8}  {:>14}  {:>9}  {:>21}  {:>8}",
        "rank",
        "memory",
        "handle",
        "alloc+rdv (ms)",
        "push (ms)",
        "GB/s per rank (range)",
        "verified"
    );
    for (rank, d) in results {
        // A rank alone sends nothing to a peer: a rate would read as 0.00.
        let range = if world < 2 {
            "- (no peers)".to_owned()
        } else {
            format!(
                "{:.2} ({:.2}-{:.2})",
                num(d, "gbps"),
                num(d, "gbps_min"),
                num(d, "gbps_max")
            )
        };
        println!(
            "{:>4}  {:<7}  {:<8}  {:>14.3}  {:>9.3}  {:>21}  {:>8}",
            rank,
            device_name(&d["device"]),
            d["handle_type"].as_str().unwrap_or("?"),
            num(d, "setup_ms"),
            num(d, "push_median_us") / 1e3,
            range,
            if d["mismatched_bytes"].as_u64() == Some(0) {
                "yes"
            } else {
                "NO"
            }
        );
    }
}

fn print_json(
    args: &DemoArgs,
    resolved: &crate::setup::Resolved,
    results: &[(usize, &Value)],
) -> Result<(), Failure> {
    let ranks: Vec<Value> = results
        .iter()
        .map(|(rank, d)| {
            json!({
                "rank": rank,
                "memory": device_name(&d["device"]),
                "handle_type": d["handle_type"],
                "alloc_rendezvous_ms": rounded(d["setup_ms"].as_f64().unwrap_or(f64::NAN)),
                "push_median_ms": rounded(d["push_median_us"].as_f64().unwrap_or(f64::NAN) / 1e3),
                "gbps": rounded(d["gbps"].as_f64().unwrap_or(f64::NAN)),
                "gbps_min": rounded(d["gbps_min"].as_f64().unwrap_or(f64::NAN)),
                "gbps_max": rounded(d["gbps_max"].as_f64().unwrap_or(f64::NAN)),
                "verified_bytes": d["verified_bytes"],
                "mismatched_bytes": d["mismatched_bytes"],
                "failures": d["failures"],
            })
        })
        .collect();
    let doc = json!({
        "command": "demo",
        "version": symmwin::BUILD_VERSION,
        "world": args.world,
        "size": args.size,
        "iters": args.iters,
        "provider": resolved.used.name(),
        "provider_requested": resolved.requested.name(),
        "ranks": ranks,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure::run(e.to_string()))?;
    println!("{text}");
    Ok(())
}
