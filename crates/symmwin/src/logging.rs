//! `SYMMWIN_LOG`: one log setup for every way in (the CLI, the C ABI, torch).
//!
//! The library logs through `tracing`. Nothing is logged unless `SYMMWIN_LOG` is set
//! (a library must not take over its host's logging), but for the one line a host wait
//! longer than 10 s prints every 30 s (see `waiting`, silenced by `SYMMWIN_LOG=error`);
//! when it is, a subscriber
//! writing to stderr is installed once per process, unless the process already has
//! one. A filter that does not parse is an error, never a silent default. Colours
//! (ANSI escapes) are written only when stderr is a terminal, never into a file.

use std::io::IsTerminal;
use std::sync::OnceLock;

use crate::config::{log_filter as parse, refusal};
use symmwin_device::error::{Error, Result};

/// Install the `SYMMWIN_LOG` subscriber, or `fallback` when the variable is unset
/// (`None`: install nothing). Idempotent; later calls return the first outcome.
pub fn init(fallback: Option<&str>) -> Result<()> {
    static OUTCOME: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    OUTCOME
        .get_or_init(|| {
            let spec = match std::env::var("SYMMWIN_LOG") {
                Ok(spec) => spec,
                Err(_) => match fallback {
                    Some(f) => f.to_owned(),
                    None => return Ok(()),
                },
            };
            let filter = parse(&spec).map_err(|why| refusal("SYMMWIN_LOG", &spec, &why))?;
            // A host program may have installed its own subscriber: keep it.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .try_init();
            Ok(())
        })
        .clone()
        .map_err(Error::invalid)
}

/// True when `SYMMWIN_LOG` asks for logs.
pub fn requested() -> bool {
    std::env::var_os("SYMMWIN_LOG").is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_or_are_refused() {
        assert!(parse("debug").is_ok());
        assert!(parse("symmwin=trace,warn").is_ok());
        let err = parse("symmwin=loud").unwrap_err();
        assert!(err.starts_with("is not a log filter"), "{err}");
    }
}
