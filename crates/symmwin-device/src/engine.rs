//! Which engine moves the bytes of an op whose sizes are known on the host.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};

/// Environment variable that sets the default [`Engine`] of a process.
pub const ENGINE_ENV: &str = "SYMMWIN_OPS_ENGINE";

/// The engine of `all_to_all`, `broadcast`, `put` and `get` (the ops whose sizes the
/// host knows). Ops whose sizes live on the device (the `all_to_all_vdev` family,
/// `tile_reduce`) always run as SM kernels; host memory is always copied by the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Engine {
    /// Per size, the engine measured to be faster on this kind of machine.
    #[default]
    Auto,
    /// Kernels: loads and stores through the SMs, signalling fused into the copy.
    Sm,
    /// Peer copies on the copy engine: no SM is used, so compute keeps all of them.
    CopyEngine,
}

impl Engine {
    /// The process default: [`ENGINE_ENV`] when set (`auto`, `sm`, `copy_engine`),
    /// else [`Engine::Auto`]. An unknown value is an error, never silently ignored.
    pub fn from_env() -> Result<Engine> {
        match std::env::var(ENGINE_ENV) {
            Ok(value) => value
                .parse()
                .map_err(|e: Error| Error::invalid(format!("{ENGINE_ENV}: {}", e.kind()))),
            Err(std::env::VarError::NotPresent) => Ok(Engine::Auto),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::invalid(format!("{ENGINE_ENV} is not UTF-8")))
            }
        }
    }

    /// [`Engine::from_env`], read once per process: ops consult it on every call, and
    /// reading the environment allocates.
    pub fn process_default() -> Result<Engine> {
        // Keep the reason alone: `Error::invalid` adds the prefix again.
        static DEFAULT: OnceLock<std::result::Result<Engine, String>> = OnceLock::new();
        let reason = |e: Error| match e.into_kind() {
            ErrorKind::InvalidArgument(reason) => reason,
            other => other.to_string(),
        };
        DEFAULT
            .get_or_init(|| Engine::from_env().map_err(reason))
            .clone()
            .map_err(Error::invalid)
    }

    /// `choice` when the caller forced one, else the process default.
    pub fn resolve(choice: Option<Engine>) -> Result<Engine> {
        choice.map_or_else(Engine::process_default, Ok)
    }
}

impl FromStr for Engine {
    type Err = Error;

    fn from_str(s: &str) -> Result<Engine> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Engine::Auto),
            "sm" | "kernel" => Ok(Engine::Sm),
            "copy_engine" | "ce" | "copy-engine" => Ok(Engine::CopyEngine),
            other => Err(Error::invalid(format!(
                "unknown engine {other:?} (expected auto, sm or copy_engine)"
            ))),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Auto => "auto",
            Engine::Sm => "sm",
            Engine::CopyEngine => "copy_engine",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for e in [Engine::Auto, Engine::Sm, Engine::CopyEngine] {
            assert_eq!(e.to_string().parse::<Engine>().unwrap(), e);
        }
        assert_eq!("CE".parse::<Engine>().unwrap(), Engine::CopyEngine);
        assert!("dma".parse::<Engine>().is_err());
    }

    #[test]
    fn a_forced_choice_wins_over_the_default() {
        assert_eq!(Engine::resolve(Some(Engine::Sm)).unwrap(), Engine::Sm);
    }
}
