//! Directories only this user may enter: where sockets and store files live.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use crate::error::{Error, ErrorKind, Phase, Result};

/// Create `dir` (and missing parents) as `0700`; refuse it unless it is a real
/// directory owned by us that no other user can enter. `what` names the directory and
/// `guards` what it protects, for the error message.
pub(crate) fn ensure(dir: &Path, what: &str, guards: &str, phase: Phase) -> Result<()> {
    let refuse = |why: String| {
        Error::new(
            phase,
            ErrorKind::Rejected(format!("{what} {}: {why}", dir.display())),
        )
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        // Something else by that name: the checks below say what is wrong with it.
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::os(phase, "mkdir", e))
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| Error::os(phase, "lstat", e))?;
    if !meta.file_type().is_dir() {
        return Err(refuse("is not a directory (a symlink is refused)".into()));
    }
    let uid = rustix::process::getuid().as_raw();
    if meta.uid() != uid {
        return Err(refuse(format!(
            "is owned by uid {}, not by us ({uid})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "has mode {:o}; it must be 0700 so other users cannot reach {guards}",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}
