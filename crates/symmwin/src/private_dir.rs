//! Directories only this user may enter: where sockets and store files live.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// Create `dir` (and missing parents) as `0700`; refuse it unless it is a real
/// directory owned by us that no other user can enter, in parents no other user can
/// swap it out of. `what` names the directory and
/// `guards` what it protects, for the error message.
pub(crate) fn ensure(dir: &Path, what: &str, guards: &str, phase: Phase) -> Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        // Something else by that name: the checks below say what is wrong with it.
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::os(phase, "mkdir", naming(e, what, dir)))
        }
        _ => {}
    }
    verify(dir, what, guards, phase)?;
    check_ancestors(dir, what, phase)
}

/// [`ensure`] without creating anything or looking above `dir`: for a directory
/// checked before, every time it is used again (someone may have changed it since).
pub(crate) fn verify(dir: &Path, what: &str, guards: &str, phase: Phase) -> Result<()> {
    let refuse = |why: String| {
        Error::new(
            phase,
            ErrorKind::Rejected(format!("{what} {}: {why}", dir.display())),
        )
    };
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        // It was there when it was first checked: someone removed it since.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(
                "no longer exists: it was removed while in use (by another process of \
                 this job, or a cleanup that ran too early)"
                    .into(),
            ))
        }
        Err(e) => return Err(Error::os(phase, "lstat", naming(e, what, dir))),
    };
    match problem(&meta, what, guards) {
        Some(why) => Err(refuse(why)),
        None => Ok(()),
    }
}

/// What is wrong with a directory (`meta` from lstat) meant to be private, or `None`:
/// not a real directory, owned by another user, or open to others. Also what the
/// settings check at import says about an existing `SYMMWIN_SOCKET_DIR` /
/// `SYMMWIN_STORE_DIR`, so both give the same reason and the same advice.
pub(crate) fn problem(meta: &std::fs::Metadata, what: &str, guards: &str) -> Option<String> {
    if !meta.file_type().is_dir() {
        return Some("is not a directory (a symlink is refused)".into());
    }
    let uid = rustix::process::getuid().as_raw();
    if meta.uid() != uid {
        return Some(format!(
            "is owned by uid {}, not by us ({uid}), with mode {:o}: another user made \
             it, or it is shared; set {} to a new path of your own (symmwin creates it \
             0700). It is refused, and no other directory is tried: every rank must use \
             the same one",
            meta.uid(),
            meta.mode() & 0o7777,
            variable_of(what),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Some(format!(
            "has mode {:o}; it must be 0700 so other users cannot reach {guards}{}",
            meta.mode() & 0o7777,
            advice_for_mode(meta.mode(), what),
        ));
    }
    None
}

/// The setting that names a directory described as `what`.
fn variable_of(what: &str) -> &'static str {
    if what.contains("store") {
        "SYMMWIN_STORE_DIR"
    } else {
        "SYMMWIN_SOCKET_DIR"
    }
}

/// What to do about a directory of ours with the wrong mode: never to change it (it
/// may be shared, as /tmp is, or relied on by something else), but to use a new one.
fn advice_for_mode(mode: u32, what: &str) -> String {
    let shared = if mode & 0o022 != 0 {
        " (it is shared: others may write to it)"
    } else {
        ""
    };
    format!(
        "{shared}; set {} to a new path instead (symmwin creates it 0700), rather than \
         changing this directory",
        variable_of(what)
    )
}

/// `e` with the path it concerns: "No such file or directory (socket directory /x)".
fn naming(e: std::io::Error, what: &str, path: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{e} ({what} {})", path.display()))
}

/// Every directory above `dir` must be safe from other users: owned by us or root,
/// and if others may write to it, sticky (so they cannot rename `dir` away and put
/// their own in its place).
fn check_ancestors(dir: &Path, what: &str, phase: Phase) -> Result<()> {
    let uid = rustix::process::getuid().as_raw();
    let absolute = std::path::absolute(dir).map_err(|e| Error::os(phase, "getcwd", e))?;
    for parent in absolute.ancestors().skip(1) {
        let meta = std::fs::metadata(parent)
            .map_err(|e| Error::os(phase, "stat", naming(e, "parent directory", parent)))?;
        let mode = meta.mode();
        let others_write = mode & 0o022 != 0;
        let sticky = mode & 0o1000 != 0;
        let owner_ok = meta.uid() == uid || meta.uid() == 0;
        if !owner_ok || (others_write && !sticky) {
            return Err(Error::new(
                phase,
                ErrorKind::Rejected(format!(
                    "{what} {}: its parent {} (mode {:o}, uid {}) lets other users \
                     replace it; use a directory under one only you (or root, with the \
                     sticky bit) can write",
                    dir.display(),
                    parent.display(),
                    mode & 0o7777,
                    meta.uid()
                )),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_private_directory_in_a_parent_others_can_write_is_refused() {
        let root = std::env::temp_dir().join(format!("symmwin-parent-{}", std::process::id()));
        let open = root.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure(
            &open.join("private"),
            "socket directory",
            "the sockets",
            Phase::Exchange,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("lets other users replace it"), "{err}");
        // The sticky bit (as on /tmp) makes the same parent safe.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        ensure(
            &open.join("private"),
            "socket directory",
            "the sockets",
            Phase::Exchange,
        )
        .unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_created_is_named() {
        let err = ensure(
            Path::new("/proc/nope/sockets"),
            "socket directory",
            "the sockets",
            Phase::Exchange,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("mkdir failed") && err.contains("(socket directory /proc/nope/sockets)"),
            "{err}"
        );
    }
}
