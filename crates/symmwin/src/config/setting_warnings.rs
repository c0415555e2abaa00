//! Settings that are accepted but do nothing: a misspelt variable name
//! (`SYMMWIN_TIMOUT_MS`) and a `SYMMWIN_LOG` filter that selects none of symmwin's
//! messages (`SYMMWIN_LOG=nonsense`). Neither is an error (an unknown variable may be
//! another tool's, and a filter may be meant for other crates), so each is a warning,
//! printed once per process on stderr by [`warn_once`].
//!
//! Only near misses of the names in [`SETTINGS`] count: the project's build and test
//! variables ([`BUILD_AND_TEST_VARIABLES`]) are no runtime settings and never warn.

use std::ffi::OsString;
use std::sync::Once;

use crate::config::SETTINGS;

/// Variables of the build and of the test suites, not read at run time: never a near
/// miss, even when one looks like a setting.
pub const BUILD_AND_TEST_VARIABLES: &[&str] = &[
    "SYMMWIN_PREBUILT_LIB",
    "SYMMWIN_PREBUILT_CLI",
    "SYMMWIN_TORCH_VERSION",
    "SYMMWIN_JIT_DIR",
    "SYMMWIN_KEEP_WHEEL",
    "SYMMWIN_VENV",
    "SYMMWIN_EXIT_RUNS",
    "SYMMWIN_TIMEOUT_REPORT",
    "SYMMWIN_LEFTOVER_CHILD",
    "SYMMWIN_CLI_TEST_LEAVE_EARLY",
    "SYMMWIN_TEST_*",
    "SYMMWIN_SOAK_*",
];

/// How many single-character edits a name may be from a setting's to be taken for a
/// misspelling of it.
const MAX_EDITS: usize = 2;

/// Print [`warnings`] of this process's environment on stderr, the first time only.
pub fn warn_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for line in warnings(std::env::vars_os()) {
            eprintln!("symmwin: warning: {line}");
        }
    });
}

/// One line for each variable of `env` that is set but does nothing.
pub fn warnings(env: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, value) in env {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if name == "SYMMWIN_LOG" && !value.is_empty() && !selects_symmwin(value) {
            lines.push(format!(
                "SYMMWIN_LOG={value:?} selects none of symmwin's messages (their targets \
                 start with symmwin); e.g. SYMMWIN_LOG=debug or SYMMWIN_LOG=symmwin=debug"
            ));
        } else if let Some(meant) = near_miss(name) {
            lines.push(format!(
                "{name} is not a symmwin setting and is ignored; did you mean {meant}? \
                 (the settings: README, Configuration)"
            ));
        }
    }
    lines.sort();
    lines
}

/// The setting `name` is a misspelling of, or `None` (a setting, a build or test
/// variable, or nothing like one).
pub fn near_miss(name: &str) -> Option<&'static str> {
    let suffix = name.strip_prefix("SYMMWIN_")?;
    if SETTINGS.iter().any(|s| s.name == name) || is_build_or_test_variable(name) {
        return None;
    }
    let upper = suffix.to_ascii_uppercase();
    let wanted = |setting: &&'static str| &setting["SYMMWIN_".len()..];
    SETTINGS
        .iter()
        .map(|s| s.name)
        .filter(|setting| {
            let wanted = wanted(setting);
            edits(&upper, wanted) <= MAX_EDITS
                || (upper.len() >= 4 && (wanted.starts_with(&upper) || upper.starts_with(wanted)))
        })
        .min_by_key(|setting| edits(&upper, wanted(setting)))
}

fn is_build_or_test_variable(name: &str) -> bool {
    BUILD_AND_TEST_VARIABLES
        .iter()
        .any(|v| match v.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => *v == name,
        })
}

/// Whether the `SYMMWIN_LOG` filter `spec` (already known to parse) enables any level
/// for symmwin's targets (`symmwin`, `symmwin_capi`, `symmwin_cli`, and their modules).
/// An explicit `off` counts as meant.
fn selects_symmwin(spec: &str) -> bool {
    use tracing_subscriber::filter::LevelFilter;
    spec.split(',').map(str::trim).any(|directive| {
        if directive.is_empty() {
            return false;
        }
        let (target, level) = match directive.split_once('=') {
            Some((target, level)) => (target, level.parse::<LevelFilter>().ok()),
            None => match directive.parse::<LevelFilter>() {
                Ok(level) => ("", Some(level)),
                Err(_) => (directive, Some(LevelFilter::TRACE)),
            },
        };
        if level == Some(LevelFilter::OFF) {
            return true;
        }
        // A span or field part (`target[span{field}]`) narrows what the target selects.
        let target = target.split('[').next().unwrap_or("");
        target.is_empty() || "symmwin".starts_with(target) || target.starts_with("symmwin")
    })
}

/// Levenshtein distance between `a` and `b`.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    #[test]
    fn misspelt_settings_are_named_with_the_setting_meant() {
        for (typo, meant) in [
            ("SYMMWIN_TIMOUT_MS", "SYMMWIN_TIMEOUT_MS"),
            ("SYMMWIN_TIMEOUT", "SYMMWIN_TIMEOUT_MS"),
            ("SYMMWIN_SOCKETDIR", "SYMMWIN_SOCKET_DIR"),
            ("SYMMWIN_debug_free", "SYMMWIN_DEBUG_FREE"),
            ("SYMMWIN_HANDLE", "SYMMWIN_HANDLE_TYPE"),
            ("SYMMWIN_LOGS", "SYMMWIN_LOG"),
        ] {
            assert_eq!(near_miss(typo), Some(meant), "{typo}");
            let lines = warnings(env(&[(typo, "1")]));
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(
                lines[0].contains(&format!("did you mean {meant}?")),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn settings_build_and_test_variables_and_other_names_do_not_warn() {
        let mut quiet: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        quiet.extend([
            "SYMMWIN_PREBUILT_LIB",
            "SYMMWIN_TEST_SCENARIO",
            "SYMMWIN_SOAK_CYCLES",
            "SYMMWIN_TIMEOUT_REPORT",
            "SYMMWIN_KEEP_WHEEL",
            "SYMMWIN_JIT_DIR",
            "SYMMWIN_VENV",
            "PATH",
            "SYMMWIN_SOMETHING_ELSE_ENTIRELY",
        ]);
        for name in quiet {
            assert_eq!(near_miss(name), None, "{name}");
        }
        let pairs: Vec<(&str, &str)> = SETTINGS.iter().map(|s| (s.name, "")).collect();
        assert!(warnings(env(&pairs)).is_empty());
    }

    #[test]
    fn a_log_filter_that_selects_nothing_of_symmwin_warns() {
        for spec in ["nonsense", "torch=debug", "other=trace,foo"] {
            let lines = warnings(env(&[("SYMMWIN_LOG", spec)]));
            assert_eq!(lines.len(), 1, "{spec}: {lines:?}");
            assert!(
                lines[0].contains("selects none of symmwin's messages"),
                "{lines:?}"
            );
        }
        for spec in [
            "debug",
            "warn",
            "symmwin=trace,warn",
            "symmwin::window=debug",
            "symmwin_cli=info",
            "sym=debug",
            "off",
            "symmwin[rendezvous]=debug",
        ] {
            assert!(warnings(env(&[("SYMMWIN_LOG", spec)])).is_empty(), "{spec}");
        }
    }
}
