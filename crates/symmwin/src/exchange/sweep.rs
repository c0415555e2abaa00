//! Socket files: removing those of dead processes when a socket is bound, and this
//! process's own at exit.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use symmwin_device::lock::Recover;

/// Socket paths this process has bound and not yet removed.
pub(super) fn own_sockets() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static OWN: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    OWN.lock().recover()
}

/// Remove the socket files of every endpoint of this process, for process exit:
/// groups and windows kept alive until then (by statics, or by objects an
/// interpreter never destroys) would otherwise leave them behind. Endpoints stay
/// usable locally; no peer can reach them afterwards. The number removed.
pub fn remove_own_sockets() -> usize {
    let paths: Vec<PathBuf> = own_sockets().drain(..).collect();
    paths
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// Sockets left by killed processes would only confuse a reader of the directory;
/// remove those whose owning pid (the name's first field) is gone. Once per process.
pub(super) fn remove_stale_sockets(dir: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| sweep_dead_sockets(dir));
}

/// The pid in a socket name this module makes (`<pid>-<16 hex>-<16 hex>.sock`).
fn socket_name_pid(name: &str) -> Option<i32> {
    let stem = name.strip_suffix(".sock")?;
    let mut parts = stem.split('-');
    let pid = parts.next()?;
    let hex16 = |p: Option<&str>| {
        p.is_some_and(|p| p.len() == 16 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !hex16(parts.next()) || !hex16(parts.next()) || parts.next().is_some() {
        return None;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Remove the sockets in `dir` (the socket directory) of the processes `pids`, once
/// they are gone: what a supervisor that killed its ranks (the `symmwin` command on
/// Ctrl-C) does, since a killed process cannot remove its own. Returns how many.
pub fn remove_sockets_of(dir: &Path, pids: &[u32]) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(socket_name_pid) else {
            continue;
        };
        let ours = u32::try_from(pid).is_ok_and(|p| pids.contains(&p));
        if ours
            && entry.file_type().is_ok_and(|t| t.is_socket())
            && !pid_alive(pid)
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

fn pid_alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .map(|p| rustix::process::test_kill_process(p).is_ok())
        .unwrap_or(false)
}

/// Remove the sockets in `dir` named as ours whose pid is gone. Anything that is not
/// a socket (a file, a symlink) is left alone whatever its name.
fn sweep_dead_sockets(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(socket_name_pid) else {
            continue;
        };
        // `DirEntry::file_type` does not follow symlinks.
        if !entry.file_type().is_ok_and(|t| t.is_socket()) {
            continue;
        }
        if !pid_alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_deletes_only_dead_sockets_it_named() {
        let dir = std::env::temp_dir().join(format!("symmwin-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // No process has a pid above the kernel's largest pid_max (2^22).
        let dead = format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 7, 1, 2);
        let socket = dir.join(&dead);
        let _bound = std::os::unix::net::UnixDatagram::bind(&socket).unwrap();
        let file = dir.join(format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 8, 1, 2));
        std::fs::write(&file, b"a user's file").unwrap();
        let link = dir.join(format!("{}-{:016x}-{:016x}.sock", (1 << 22) + 9, 1, 2));
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let odd = dir.join(format!("{}-x.sock", (1 << 22) + 10));
        let _odd_bound = std::os::unix::net::UnixDatagram::bind(&odd).unwrap();
        sweep_dead_sockets(&dir);
        assert!(!socket.exists(), "the dead rank's socket goes");
        assert!(file.exists(), "a regular file stays");
        assert!(std::fs::symlink_metadata(&link).is_ok(), "a symlink stays");
        assert!(odd.exists(), "a socket named otherwise stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
