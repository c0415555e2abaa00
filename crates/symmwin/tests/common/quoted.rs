//! Checking that docs/troubleshooting.md quotes an error as users see it.

/// `message` with its run-to-run parts blurred: every word holding a path becomes
/// `<path>`, every run of digits `0`.
pub fn skeleton(message: &str) -> String {
    let blur = |word: &str| {
        if word.contains('/') {
            return "<path>".to_owned();
        }
        let mut out = String::new();
        for c in word.chars() {
            if !(c.is_ascii_digit() && out.ends_with('0')) {
                out.push(if c.is_ascii_digit() { '0' } else { c });
            }
        }
        out
    };
    message
        .split_whitespace()
        .map(blur)
        .collect::<Vec<_>>()
        .join(" ")
}

/// docs/troubleshooting.md quotes `message` (from its `symmwin rank` on), up to the
/// parts [`skeleton`] blurs.
pub fn assert_quoted(message: &str) {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/troubleshooting.md"
    ))
    .unwrap();
    let from_rank = |s: &str| s.find("symmwin rank").map(|i| skeleton(&s[i..]));
    let wanted = from_rank(message).expect("a message naming its rank");
    assert!(
        page.lines().any(|l| from_rank(l).as_ref() == Some(&wanted)),
        "docs/troubleshooting.md does not quote:\n{message}"
    );
}
