//! The `symmwin` command: probe devices, run the verified all-to-all demo, benchmark
//! rendezvous. Thin wiring over the `symmwin` library.

mod bench;
mod demo;
mod launch;
mod probe;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "symmwin",
    version,
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

#[derive(Subcommand)]
enum Command {
    /// Devices, VMM support, working handle types, granularity, peer access.
    Probe {
        /// Machine-readable output.
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SYMMWIN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe { json } => probe::run(json),
        Command::Demo(args) => demo::run(args),
        Command::Bench { what } => bench::run(what),
        Command::Worker(args) => worker::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("symmwin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parse sizes like `64M`, `1G`, `4096`, `256KiB`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: usize = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} overflows"))
}

/// Human size: 64 MiB, 256 KiB, 100 B.
pub fn human_size(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
        assert_eq!(human_size(64 << 20), "64 MiB");
        assert_eq!(human_size(100), "100 B");
    }
}
