//! The `symmwin` command: probe devices, run the verified all-to-all demo, benchmark
//! rendezvous. Thin wiring over the `symmwin` library.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod bench;
mod demo;
mod ending;
mod failure;
mod interrupt;
mod launch;
mod preflight;
mod probe;
mod progress;
mod setup;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use failure::Failure;

#[derive(Parser)]
#[command(
    name = "symmwin",
    version = symmwin::BUILD_VERSION,
    about = "Symmetric memory windows: probe, demo, bench"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Which memory the ranks share.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum ProviderChoice {
    /// CUDA when a GPU is present, host memory otherwise.
    Auto,
    /// Host shared memory (memfd).
    Host,
    /// CUDA VMM device memory; ranks round-robin over GPUs.
    Cuda,
}

impl ProviderChoice {
    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ProviderChoice::Auto => "auto",
            ProviderChoice::Host => "host",
            ProviderChoice::Cuda => "cuda",
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Devices, VMM support, working handle types, granularity, peer access.
    Probe {
        /// Print JSON on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// N processes all-to-all over one window each, every byte verified.
    Demo(demo::DemoArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// One rank of a demo or bench (started by `demo` and `bench`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = symmwin::adapter::init_logging(Some("warn")) {
        eprintln!("{}", Failure::setup(e));
        return ExitCode::from(failure::EXIT_SETUP);
    }
    let result = match cli.command {
        Command::Probe { json } => probe::run(json),
        Command::Demo(args) => demo::run(args),
        Command::Bench { what } => bench::run(what),
        Command::Worker(args) => worker::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}

/// A count that must be at least 1 (`--world`, `--iters`).
pub fn parse_count(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// Parse sizes like `64M`, `1.5M`, `1G`, `4096`, `256KiB`; at least one byte.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} (use K, M or G)")),
    };
    let bytes = match num.split_once('.') {
        None => num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| format!("{s:?} is not a size"))?,
        Some(_) => {
            let x: f64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
            let bytes = x * mult as f64;
            if bytes.fract() != 0.0 || bytes > u64::MAX as f64 {
                return Err(format!("{s:?} is not a whole number of bytes"));
            }
            bytes as u64
        }
    };
    if bytes == 0 {
        return Err("must be at least 1 byte".into());
    }
    usize::try_from(bytes).map_err(|_| format!("{s:?} overflows"))
}

/// Human size: 64 MiB, 1.5 MiB, 256 KiB, 100 B.
pub fn human_size(n: usize) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift {
            let x = n as f64 / (1u64 << shift) as f64;
            return if n.is_multiple_of(1 << shift) {
                format!("{} {unit}", n >> shift)
            } else {
                format!("{x:.1} {unit}")
            };
        }
    }
    format!("{n} B")
}

/// `1 round`, `3 rounds`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A float for JSON output, rounded to 3 decimals (no 8.645999999999999).
pub fn rounded(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!((x * 1e3).round() / 1e3)
    } else {
        serde_json::Value::Null
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("0").is_err());
        assert!(parse_size("0.3K").is_err());
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
        assert_eq!(human_size(64 << 20), "64 MiB");
        assert_eq!(human_size(3 << 19), "1.5 MiB");
        assert_eq!(human_size(100), "100 B");
        assert_eq!(human_size(3 << 40), "3 TiB");
        assert_eq!(plural(1, "round"), "1 round");
        assert_eq!(plural(2, "round"), "2 rounds");
        assert_eq!(rounded(8.645999999999999), serde_json::json!(8.646));
    }

    #[test]
    fn counts_below_one_are_refused() {
        assert_eq!(parse_count("3"), Ok(3));
        assert!(parse_count("0").is_err());
        assert!(parse_count("-1").is_err());
    }
}
