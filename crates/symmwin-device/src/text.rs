//! Bounded text for error messages: what a peer supplied (host names, paths, group
//! names) is clipped, and long rank lists are summarised, so an error stays readable
//! and small whatever the peers sent or however large the world is; durations read as
//! [`Seconds`].

use std::fmt;
use std::time::Duration;

/// Longest peer-supplied string echoed in full, in bytes.
pub const MAX_ECHO: usize = 200;

/// Ranks listed one by one before the rest is summarised.
pub const MAX_RANKS_LISTED: usize = 16;

/// `s`, or its first [`MAX_ECHO`] bytes (on a character boundary) and how much was cut.
pub fn clip(s: &str) -> String {
    if s.len() <= MAX_ECHO {
        return s.to_owned();
    }
    let mut end = MAX_ECHO;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} more bytes)", &s[..end], s.len() - end)
}

/// The `Debug` form of `value`, cut at [`MAX_ECHO`] bytes without ever building the
/// whole of it (a peer's 100 MB host name costs no 100 MB string here).
pub fn debug_clipped(value: &impl std::fmt::Debug) -> String {
    struct Bounded(String);
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = MAX_ECHO.saturating_sub(self.0.len());
            if s.len() <= room {
                self.0.push_str(s);
                return Ok(());
            }
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.0.push_str(&s[..end]);
            Err(std::fmt::Error)
        }
    }
    let mut out = Bounded(String::new());
    if std::fmt::write(&mut out, format_args!("{value:?}")).is_err() {
        out.0.push_str("... (cut)");
    }
    out.0
}

/// `[0, 1, 2]`, or for a long list its first ranks and a count:
/// `[0, 1, ..., 15, ... 99984 more]`.
pub fn ranks(list: &[usize]) -> String {
    if list.len() <= MAX_RANKS_LISTED {
        return format!("{list:?}");
    }
    let head: Vec<String> = list[..MAX_RANKS_LISTED]
        .iter()
        .map(|r| r.to_string())
        .collect();
    format!(
        "[{}, ... {} more]",
        head.join(", "),
        list.len() - MAX_RANKS_LISTED
    )
}

/// A duration as people read it in an error: `2.0 s`, `0.25 s`.
pub struct Seconds(pub Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        // 0.999 s (a wait that ends a hair before its deadline) reads as 1.0 s.
        if s >= 0.995 || s == 0.0 {
            write!(f, "{s:.1} s")
        } else {
            write!(f, "{s:.2} s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_and_rank_lists_are_bounded() {
        assert_eq!(clip("host"), "host");
        let long = "é".repeat(1 << 20);
        let clipped = clip(&long);
        assert!(clipped.len() < MAX_ECHO + 40, "{}", clipped.len());
        assert!(clipped.ends_with("more bytes)"), "{clipped}");
        let debug = debug_clipped(&"x".repeat(1 << 20));
        assert!(
            debug.starts_with("\"xxx") && debug.ends_with("... (cut)"),
            "{debug}"
        );
        assert!(debug.len() <= MAX_ECHO + 10, "{}", debug.len());
        assert_eq!(debug_clipped(&7u32), "7");
        assert_eq!(ranks(&[0, 2]), "[0, 2]");
        let all: Vec<usize> = (0..100_000).collect();
        let summary = ranks(&all);
        assert!(summary.starts_with("[0, 1, 2, "), "{summary}");
        assert!(summary.ends_with("... 99984 more]"), "{summary}");
        assert!(summary.len() < 120, "{summary}");
    }
}
