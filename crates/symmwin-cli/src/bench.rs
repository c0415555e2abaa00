//! `symmwin bench`: alloc + rendezvous + free latency by size and world, split by phase.

use std::process::ExitCode;

use clap::Subcommand;
use indicatif::ProgressBar;
use serde_json::Value;

use crate::launch::{report_failures, run_workers, StoreDir};
use crate::ProviderChoice;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Alloc + rendezvous + free latency, split into create, export (wait), publish,
    /// gather, reserve, exchange, import, map and pad phases.
    Rendezvous {
        /// World sizes to run (comma-separated).
        #[arg(long, default_value = "2", value_delimiter = ',')]
        world: Vec<usize>,
        /// Window sizes (comma-separated).
        #[arg(long, default_value = "2M,64M,1G", value_delimiter = ',', value_parser = crate::parse_size)]
        sizes: Vec<usize>,
        /// Timed repeats per size (after one warm-up).
        #[arg(long, default_value_t = 20)]
        iters: usize,
        #[arg(long, value_enum, default_value_t = ProviderChoice::Auto)]
        provider: ProviderChoice,
        /// Write all samples as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Keep every window of a size alive until the size is done, so that each
        /// is new memory; by default each is freed at once, so from the second
        /// repeat on a size is re-allocated (and may take a freed window over).
        #[arg(long)]
        fresh: bool,
    },
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode, String> {
    let BenchCommand::Rendezvous {
        world,
        sizes,
        iters,
        provider,
        json,
        fresh,
    } = cmd;
    let sizes_arg = sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut all = Vec::new();
    println!(
        "{:>5} {:>8} | {:>22} | {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>7}",
        "world",
        "size",
        "alloc+rdv ms med (range)",
        "create",
        "export",
        "publish",
        "gather",
        "reserve",
        "exch",
        "import",
        "map",
        "pads",
        "other",
        "free",
        "reused"
    );
    for &w in &world {
        let store = StoreDir::new()?;
        let bar = ProgressBar::new((w * sizes.len() * (iters + 1)) as u64);
        let outcomes = run_workers(
            w,
            |rank| {
                [
                    "--task",
                    "bench-rendezvous",
                    "--rank",
                    &rank.to_string(),
                    "--world",
                    &w.to_string(),
                    "--store",
                    &store.0.display().to_string(),
                    "--provider",
                    &format!("{provider:?}").to_lowercase(),
                    "--sizes",
                    &sizes_arg,
                    "--iters",
                    &iters.to_string(),
                ]
                .iter()
                .map(|s| s.to_string())
                .chain(fresh.then(|| "--fresh".to_string()))
                .collect()
            },
            |_, _| bar.inc(1),
        )?;
        bar.finish_and_clear();
        if !report_failures(&outcomes) {
            return Ok(ExitCode::FAILURE);
        }
        let wrong: u64 = outcomes
            .iter()
            .filter_map(|o| o.result.as_ref())
            .map(|r| r["data"]["wrong"].as_u64().unwrap_or(1))
            .sum();
        if wrong > 0 {
            eprintln!("world {w}: {wrong} windows were not zero-filled or lost a peer's write");
            return Ok(ExitCode::FAILURE);
        }
        for (i, &size) in sizes.iter().enumerate() {
            // Every rank's samples together: the latency a job sees is any rank's.
            let samples: Vec<&Value> = outcomes
                .iter()
                .filter_map(|o| o.result.as_ref())
                .flat_map(|r| {
                    r["data"]["rows"][i]["samples"]
                        .as_array()
                        .into_iter()
                        .flatten()
                })
                .collect();
            let med =
                |f: &dyn Fn(&Value) -> f64| stats(samples.iter().map(|s| f(s)).collect()).0 / 1e3;
            let (total, lo, hi) = stats(
                samples
                    .iter()
                    .map(|s| s["total_us"].as_f64().unwrap_or(f64::NAN))
                    .collect(),
            );
            let phase = |name: &'static str| {
                med(&move |s: &Value| s["phases"][name].as_f64().unwrap_or(f64::NAN))
            };
            println!(
                "{:>5} {:>8} | {:>7.3} ({:.3}-{:.3}) | {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} | {:>8.3} {:>7}",
                w,
                crate::human_size(size),
                total / 1e3,
                lo / 1e3,
                hi / 1e3,
                med(&|s: &Value| s["create_us"].as_f64().unwrap_or(f64::NAN)),
                phase("export_us"),
                phase("publish_us"),
                phase("gather_us"),
                phase("reserve_us"),
                phase("exchange_us"),
                phase("import_us"),
                phase("map_us"),
                phase("pads_us"),
                med(&|s: &Value| {
                    let phases: f64 = s["phases"].as_object().into_iter().flatten().filter_map(|(_, v)| v.as_f64()).sum();
                    s["total_us"].as_f64().unwrap_or(f64::NAN) - s["create_us"].as_f64().unwrap_or(f64::NAN) - phases
                }),
                med(&|s: &Value| s["free_us"].as_f64().unwrap_or(f64::NAN)),
                format!(
                    "{}/{}",
                    samples
                        .iter()
                        .filter(|s| s["phases"]["reused"].as_bool() == Some(true))
                        .count(),
                    samples.len()
                ),
            );
        }
        all.push(serde_json::json!({"world": w, "ranks": outcomes.iter().map(|o| o.result.clone()).collect::<Vec<_>>()}));
    }
    println!("(times in ms; median over all ranks and {iters} repeats, range in parentheses; other = total - create - phases;");
    if fresh {
        println!(
            " --fresh: every window stays alive until its size is done, so each is new memory)"
        );
    } else {
        println!(" every repeat frees its window, so from the second on a size is re-allocated: reused = samples that took a freed window over whole)");
    }
    if let Some(path) = json {
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
