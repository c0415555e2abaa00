//! The file store as jobs meet it: group names as long as torch makes them, and a
//! store on a filesystem that fills up.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::quoted::assert_quoted;
use symmwin::{Allocation, Config, FileStore, Group, GroupSpec, HostProvider, Provider, Store};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "symmwin-fs-{tag}-{}-{:x}",
        std::process::id(),
        symmwin::adapter::testing::random_u64()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `world` ranks as threads of group `name` on `store`, each making one window of
/// 4096 bytes; what each rendezvous returned (the mapped ranks, or the error).
fn rendezvous(
    name: &str,
    world: usize,
    store: Arc<dyn Store>,
    sockets: &Path,
    timeout: Duration,
) -> Vec<Result<Vec<usize>, String>> {
    let threads: Vec<_> = (0..world)
        .map(|rank| {
            let (name, store) = (name.to_owned(), store.clone());
            let config = Config {
                timeout,
                socket_dir: sockets.to_path_buf(),
                ..Config::default()
            };
            std::thread::spawn(move || {
                let provider: Arc<dyn Provider> = Arc::new(HostProvider::new());
                let group =
                    Group::new(GroupSpec::new(&name, rank, world), store, provider, &config)
                        .map_err(|e| e.to_string())?;
                let alloc =
                    Allocation::new(group.provider().clone(), 4096).map_err(|e| e.to_string())?;
                let window = group.rendezvous(&alloc).map_err(|e| e.to_string())?;
                Ok(window.mapped_ranks())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn group_names_of_300_and_5000_characters_rendezvous() {
    let dir = scratch("names");
    for len in [300, 5000] {
        let store: Arc<dyn Store> = Arc::new(FileStore::new(dir.join(format!("s{len}"))).unwrap());
        let name = format!("tp-group-{}", "x".repeat(len - 9));
        let results = rendezvous(&name, 2, store, &dir.join("sock"), Duration::from_secs(10));
        for (rank, result) in results.into_iter().enumerate() {
            let mapped = result.unwrap_or_else(|e| panic!("name of {len}, rank {rank}: {e}"));
            assert_eq!(mapped, vec![0, 1]);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tmpfs of `size` mounted at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .expect("the mount command");
        assert!(
            out.status.success(),
            "this test needs permission to mount a tmpfs (root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fill the filesystem of `dir` until fewer than `leave` bytes are free.
fn fill(dir: &Path, leave: u64) {
    use std::io::Write;
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let page = [0u8; 4096];
    loop {
        let free = free_bytes(dir);
        if free < leave.max(1) {
            break;
        }
        if filler.write_all(&page).is_err() {
            break;
        }
        filler.flush().unwrap();
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let stat = rustix::fs::statvfs(dir).unwrap();
    stat.f_bavail * stat.f_frsize
}

fn assert_names_the_full_store(results: &[Result<Vec<usize>, String>], store: &Path) {
    for (rank, result) in results.iter().enumerate() {
        let err = result
            .as_ref()
            .expect_err("a full store fails the rendezvous");
        assert!(
            err.contains(&format!(
                "the filesystem of store {} is full",
                store.display()
            )) && err.contains("tmpfs mounted at"),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn a_full_store_filesystem_is_named_on_every_rank() {
    let dir = scratch("full");
    let mount = dir.join("shm");
    let _tmpfs = Tmpfs::mount(&mount, "64k");
    let store_dir = mount.join("job");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&store_dir).unwrap());

    // Entirely full: every rank fails to write its request and says where.
    fill(&store_dir, 0);
    let results = rendezvous(
        "full",
        4,
        store.clone(),
        &dir.join("sock"),
        Duration::from_secs(2),
    );
    assert_names_the_full_store(&results, &store_dir);
    for result in &results {
        let err = result.as_ref().unwrap_err();
        assert!(err.contains("No space left on device"), "{err}");
    }

    // Room for every rank's join record (a page each) and one request file: at most
    // the four records come before the first request, which fits; a rank that wrote
    // its request while the others could not reports the full filesystem instead of
    // a bare timeout.
    std::fs::remove_file(store_dir.join("filler")).unwrap();
    for entry in std::fs::read_dir(&store_dir).unwrap() {
        let _ = std::fs::remove_file(entry.unwrap().path());
    }
    fill(&store_dir, 8192 + 4 * 4096);
    let results = rendezvous("part", 4, store, &dir.join("sock"), Duration::from_secs(2));
    assert_names_the_full_store(&results, &store_dir);
    let wrote = results
        .iter()
        .filter(|r| r.as_ref().unwrap_err().contains("never appeared"))
        .count();
    assert!(wrote >= 1, "{results:#?}");
    for result in &results {
        assert_quoted(result.as_ref().unwrap_err());
    }
    drop(_tmpfs);
    std::fs::remove_dir_all(&dir).unwrap();
}
