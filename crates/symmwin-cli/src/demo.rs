//! `symmwin demo`: N processes all-to-all over one window each, every byte verified.

use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::launch::{report_failures, run_workers, StoreDir};
use crate::ProviderChoice;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of ranks (processes).
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// Bytes each rank sends to each rank (e.g. 4M, 256K).
    #[arg(long, default_value = "4M", value_parser = crate::parse_size)]
    pub size: usize,
    /// Memory to share.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Auto)]
    pub provider: ProviderChoice,
    /// All-to-all rounds (each one verified).
    #[arg(long, default_value_t = 10)]
    pub iters: usize,
    /// Print the per-rank results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DemoArgs) -> Result<ExitCode, String> {
    if args.world == 0 || args.size == 0 || args.iters == 0 {
        return Err("--world, --size and --iters must be positive".into());
    }
    let store = StoreDir::new()?;
    let bar = ProgressBar::new((args.world * args.iters) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} all-to-all rounds {pos}/{len} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let size = args.size.to_string();
    let outcomes = run_workers(
        args.world,
        |rank| {
            vec![
                "--task".into(),
                "demo".into(),
                "--rank".into(),
                rank.to_string(),
                "--world".into(),
                args.world.to_string(),
                "--store".into(),
                store.0.display().to_string(),
                "--provider".into(),
                format!("{:?}", args.provider).to_lowercase(),
                "--sizes".into(),
                size.clone(),
                "--iters".into(),
                args.iters.to_string(),
            ]
        },
        |_, _| bar.inc(1),
    )?;
    bar.finish_and_clear();
    let all_ran = report_failures(&outcomes);
    let results: Vec<_> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().map(|r| (o.rank, &r["data"])))
        .collect();
    if args.json {
        let v: Vec<_> = results
            .iter()
            .map(|(r, d)| serde_json::json!({"rank": r, "result": d}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "symmwin demo: world {}, {} per peer, {} rounds, provider {:?}",
            args.world,
            crate::human_size(args.size),
            args.iters,
            args.provider
        );
        println!(
            "{:>4} {:>6} {:>9} {:>16} {:>12} {:>22} {:>9}",
            "rank",
            "device",
            "handle",
            "alloc+rdv (ms)",
            "push (us)",
            "GB/s/rank (min-max)",
            "verified"
        );
        for (rank, d) in &results {
            println!(
                "{:>4} {:>6} {:>9} {:>16.3} {:>12.1} {:>8.2} ({:.2}-{:.2}) {:>9}",
                rank,
                d["device"],
                d["handle_type"].as_str().unwrap_or("?"),
                d["setup_ms"].as_f64().unwrap_or(f64::NAN),
                d["push_median_us"].as_f64().unwrap_or(f64::NAN),
                d["gbps"].as_f64().unwrap_or(f64::NAN),
                d["gbps_min"].as_f64().unwrap_or(f64::NAN),
                d["gbps_max"].as_f64().unwrap_or(f64::NAN),
                if d["mismatched_bytes"].as_u64() == Some(0) {
                    "yes"
                } else {
                    "NO"
                }
            );
        }
    }
    for (rank, d) in &results {
        for f in d["failures"].as_array().into_iter().flatten().take(5) {
            eprintln!("rank {rank}: {}", f.as_str().unwrap_or("?"));
        }
    }
    let verified = results.len() == args.world
        && results
            .iter()
            .all(|(_, d)| d["mismatched_bytes"].as_u64() == Some(0));
    if all_ran && verified {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("symmwin demo: verification FAILED");
        Ok(ExitCode::FAILURE)
    }
}
