//! Records the git commit the library is built from (`symmwin::BUILD_VERSION`), so
//! that results measured on a machine without the repository (a prebuilt binary or
//! static library) still say what ran.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    // Rebuild when HEAD moves or the branch it names gets a new commit.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    let local = match (commit.is_empty(), dirty) {
        (true, _) => String::new(),
        (false, false) => format!("+g{commit}"),
        (false, true) => format!("+g{commit}.dirty"),
    };
    println!(
        "cargo:rustc-env=SYMMWIN_BUILD_VERSION={}{local}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
}
