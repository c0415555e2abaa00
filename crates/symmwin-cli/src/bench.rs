//! `symmwin bench`: alloc + rendezvous + free latency by size and world, split by phase.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{json, Value};

use crate::failure::Failure;
use crate::launch::{report_endings, run_workers, Launch, StoreDir};
use crate::progress::Progress;
use crate::{human_size, plural, rounded, ProviderChoice};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Alloc + rendezvous + free latency, split into create, export (wait), publish,
    /// gather, reserve, exchange, import, map and pad phases, with the store operations
    /// and socket messages of each rank per rendezvous.
    Rendezvous {
        /// World sizes to run (comma-separated).
        #[arg(long, default_value = "2", value_delimiter = ',', value_parser = crate::parse_count)]
        world: Vec<usize>,
        /// Window sizes (comma-separated).
        #[arg(long, default_value = "2M,64M,1G", value_delimiter = ',', value_parser = crate::parse_size)]
        sizes: Vec<usize>,
        /// Timed repeats per size (after one warm-up).
        #[arg(long, default_value = "20", value_parser = crate::parse_count)]
        iters: usize,
        #[arg(long, value_enum, default_value_t = ProviderChoice::Auto)]
        provider: ProviderChoice,
        /// Print JSON (medians, ranges and every sample) on stdout instead of the table.
        #[arg(long)]
        json: bool,
        /// Keep every window of a size alive until the size is done, so that each
        /// is new memory; by default each is freed at once, so from the second
        /// repeat on a size is re-allocated (and may take a freed window over).
        #[arg(long)]
        fresh: bool,
    },
}

/// Columns after world and size: (header, how to get the value in µs from a sample).
const PHASES: [(&str, &str); 9] = [
    ("create", "create_us"),
    ("export", "export_us"),
    ("publish", "publish_us"),
    ("gather", "gather_us"),
    ("reserve", "reserve_us"),
    ("exch", "exchange_us"),
    ("import", "import_us"),
    ("map", "map_us"),
    ("pads", "pads_us"),
];

/// Median, min and max.
fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One phase of a sample in µs: `create_us` and `free_us` are top-level, the rest
/// under `phases`; `other_us` is what the phases do not account for.
fn phase_us(sample: &Value, key: &str) -> f64 {
    let get = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    match key {
        "create_us" | "free_us" | "total_us" => get(&sample[key]),
        "other_us" => {
            let phases: f64 = sample["phases"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_f64())
                .sum();
            get(&sample["total_us"]) - get(&sample["create_us"]) - phases
        }
        _ => get(&sample["phases"][key]),
    }
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode, Failure> {
    let BenchCommand::Rendezvous {
        world,
        sizes,
        iters,
        provider,
        json,
        fresh,
    } = cmd;
    let resolved = crate::setup::check(provider)?;
    let sizes_arg = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    preflight(&world, &sizes, iters, fresh)?;
    let pass_stderr = symmwin::adapter::logging_requested();
    if !json {
        print_title(&resolved, iters);
    }
    let mut rows = Vec::new();
    for &w in &world {
        let store = StoreDir::new()?;
        let rounds = (sizes.len() * (iters + 1)) as u64;
        let mut progress = Progress::new("rendezvous rounds", w, rounds, json);
        let worker_args = |rank: usize| {
            crate::worker::args(
                "bench-rendezvous",
                rank,
                w,
                &store,
                resolved.used,
                &sizes_arg,
                iters,
            )
            .into_iter()
            .chain(fresh.then(|| "--fresh".to_owned()))
            .collect()
        };
        let launch = Launch {
            world: w,
            args: &worker_args,
            grace: resolved.grace(),
            pass_stderr,
        };
        let outcomes = run_workers(&launch, &mut progress)?;
        progress.finish();
        if !report_endings(&outcomes, pass_stderr) {
            return Ok(ExitCode::from(crate::failure::EXIT_FAILED));
        }
        let wrong = wrong_windows(&outcomes);
        if wrong > 0 {
            eprintln!("world {w}: {wrong} windows were not zero-filled or lost a peer's write");
            return Ok(ExitCode::from(crate::failure::EXIT_FAILED));
        }
        for row in size_rows(w, &sizes, &outcomes) {
            if !json {
                print_row(&row);
            }
            rows.push(row);
        }
    }
    if json {
        print_json(&resolved, iters, fresh, rows)?;
    } else {
        print_footer(fresh);
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails before any rank starts when a world and size would not fit this machine
/// (memory, mappings, descriptors).
fn preflight(world: &[usize], sizes: &[usize], iters: usize, fresh: bool) -> Result<(), Failure> {
    let windows = if fresh { iters + 1 } else { 1 };
    for &w in world {
        for &size in sizes {
            crate::preflight::check(
                &crate::preflight::Needs::bench(w, size, windows),
                &format!("world {w} x {}", human_size(size)),
            )?;
        }
    }
    Ok(())
}

/// The `--json` document: the run's settings and every row, on stdout.
fn print_json(
    resolved: &crate::setup::Resolved,
    iters: usize,
    fresh: bool,
    rows: Vec<Value>,
) -> Result<(), Failure> {
    let doc = json!({
        "command": "bench rendezvous",
        "version": symmwin::BUILD_VERSION,
        "provider": resolved.used.name(),
        "provider_requested": resolved.requested.name(),
        "iters": iters,
        "fresh": fresh,
        "unit": "ms",
        "touched_bytes_per_window": 3,
        "rows": rows,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure::run(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// One summary row per size of world `w`, over every rank's samples together: the
/// latency a job sees is any rank's.
fn size_rows(w: usize, sizes: &[usize], outcomes: &[crate::launch::RankOutcome]) -> Vec<Value> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
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
            summarise(w, size, &samples)
        })
        .collect()
}

/// The table's title line and column header.
fn print_title(resolved: &crate::setup::Resolved, iters: usize) {
    println!(
        "symmwin bench rendezvous: provider {}, {} per size after one warm-up",
        resolved.describe(),
        plural(iters, "repeat")
    );
    print_header();
}

/// What the table's numbers mean.
fn print_footer(fresh: bool) {
    println!("(ms; median over all ranks and repeats, range in parentheses; other = total - create - phases;");
    println!(
        " store, msgs: store operations and socket messages sent per rank per rendezvous, medians;"
    );
    println!(
        " each window is reserved and mapped whole, but only 3 of its bytes are touched: a size beyond \
         the free memory succeeds, and no time includes faulting pages in;"
    );
    if fresh {
        println!(
            " --fresh: every window stays alive until its size is done, so each is new memory; free: not measured (-))"
        );
    } else {
        println!(" every repeat frees its window, so from the second on a size is re-allocated: reused = samples that took a freed window over whole)");
    }
}

/// Windows the workers found not zero-filled or missing a peer's write (checked
/// untimed after each rendezvous); a worker that reports no count counts as one.
fn wrong_windows(outcomes: &[crate::launch::RankOutcome]) -> u64 {
    outcomes
        .iter()
        .filter_map(|o| o.result.as_ref())
        .map(|r| r["data"]["wrong"].as_u64().unwrap_or(1))
        .sum()
}

/// How many of `samples` took a freed window over whole.
fn reused_count(samples: &[&Value]) -> usize {
    samples
        .iter()
        .filter(|s| s["phases"]["reused"].as_bool() == Some(true))
        .count()
}

/// A per-rendezvous count of one rank's sample (store operations, messages sent).
fn count(sample: &Value, key: &str) -> f64 {
    sample[key].as_f64().unwrap_or(f64::NAN)
}

/// Medians in ms of one (world, size), with every sample for the JSON output.
fn summarise(world: usize, size: usize, samples: &[&Value]) -> Value {
    let median_ms = |key: &str| stats(samples.iter().map(|s| phase_us(s, key)).collect()).0 / 1e3;
    let (total, lo, hi) = stats(samples.iter().map(|s| phase_us(s, "total_us")).collect());
    let mut phases = serde_json::Map::new();
    for (_, key) in PHASES
        .iter()
        .chain(&[("other", "other_us"), ("free", "free_us")])
    {
        phases.insert(
            key.trim_end_matches("_us").to_owned(),
            rounded(median_ms(key)),
        );
    }
    let rounded_samples: Vec<Value> = samples
        .iter()
        .map(|s| {
            let mut keys: Vec<&str> = PHASES.iter().map(|(_, k)| *k).collect();
            keys.extend(["total_us", "free_us"]);
            let mut sample: serde_json::Map<_, _> = keys
                .iter()
                .map(|k| {
                    (
                        k.trim_end_matches("_us").to_owned(),
                        rounded(phase_us(s, k) / 1e3),
                    )
                })
                .collect();
            sample.insert("reused".into(), s["phases"]["reused"].as_bool().into());
            for key in ["store_ops", "messages"] {
                sample.insert(key.into(), count(s, key).into());
            }
            sample.into()
        })
        .collect();
    let median_count = |key: &str| stats(samples.iter().map(|s| count(s, key)).collect()).0;
    json!({
        "world": world,
        "size": size,
        "store_ops": median_count("store_ops"),
        "messages": median_count("messages"),
        "total": rounded(total / 1e3),
        "total_min": rounded(lo / 1e3),
        "total_max": rounded(hi / 1e3),
        "phases": phases,
        "reused": reused_count(samples),
        "samples": rounded_samples,
    })
}

fn print_header() {
    let mut line = format!(
        "{:>5}  {:>8}  {:>24}",
        "world", "size", "alloc+rdv med (range)"
    );
    for (name, _) in PHASES.iter().chain(&[("other", ""), ("free", "")]) {
        line.push_str(&format!("  {name:>8}"));
    }
    line.push_str(&format!("  {:>7}  {:>5}  {:>4}", "reused", "store", "msgs"));
    println!("{line}");
}

fn print_row(row: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let total = format!(
        "{:.3} ({:.3}-{:.3})",
        f(&row["total"]),
        f(&row["total_min"]),
        f(&row["total_max"])
    );
    let mut line = format!(
        "{:>5}  {:>8}  {total:>24}",
        row["world"].as_u64().unwrap_or(0),
        human_size(row["size"].as_u64().unwrap_or(0) as usize)
    );
    for (_, key) in PHASES
        .iter()
        .chain(&[("other", "other_us"), ("free", "free_us")])
    {
        // Not measured (free under --fresh): a dash, not NaN.
        let value = f(&row["phases"][key.trim_end_matches("_us")]);
        if value.is_finite() {
            line.push_str(&format!("  {value:>8.3}"));
        } else {
            line.push_str(&format!("  {:>8}", "-"));
        }
    }
    let reused = format!(
        "{}/{}",
        row["reused"].as_u64().unwrap_or(0),
        row["samples"].as_array().map_or(0, Vec::len)
    );
    line.push_str(&format!(
        "  {reused:>7}  {:>5}  {:>4}",
        f(&row["store_ops"]),
        f(&row["messages"])
    ));
    println!("{line}");
}
