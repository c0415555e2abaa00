//! How a command fails: the message (prefixed "symmwin" once) and the exit code
//! (1 run failed, 2 bad command line (from clap), 3 setup failed, 128 + N signal N).

use std::fmt;
use std::process::ExitCode;

/// Exit code of a run whose ranks failed or whose data did not verify.
pub const EXIT_FAILED: u8 = 1;
/// Exit code when configuration or the device is unusable: no rank was started.
pub const EXIT_SETUP: u8 = 3;

/// A command's failure.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Configuration, probe or launch failed before any rank ran.
    pub fn setup(message: impl fmt::Display) -> Self {
        Failure {
            code: EXIT_SETUP,
            message: setup_message(&message.to_string()),
        }
    }

    /// The run itself failed.
    pub fn run(message: impl fmt::Display) -> Self {
        Failure {
            code: EXIT_FAILED,
            message: message.to_string(),
        }
    }

    /// SIGINT or SIGTERM reached the supervisor (exit code 128 + signal, as a shell).
    pub fn interrupted(signal: i32) -> Self {
        Failure {
            code: u8::try_from(128 + signal).unwrap_or(EXIT_FAILED),
            message: format!(
                "interrupted by signal {signal}: ranks stopped, store and sockets removed"
            ),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl From<symmwin::Error> for Failure {
    fn from(e: symmwin::Error) -> Self {
        Failure::run(e)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::run(message)
    }
}

/// The library's messages start with "symmwin"; ours get it added once.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.starts_with("symmwin") {
            f.write_str(&self.message)
        } else {
            write!(f, "symmwin: {}", self.message)
        }
    }
}

/// `symmwin setup failed [probe]: ...` from the library's `symmwin [probe]: ...`.
fn setup_message(message: &str) -> String {
    match message.strip_prefix("symmwin") {
        Some(rest) => format!("symmwin setup failed{rest}"),
        None => format!("symmwin setup failed: {message}"),
    }
}
