use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

use super::memory::parse_counter;
use super::Store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// A store in a directory shared by the ranks (one file per key).
///
/// Writes go to a temporary file renamed into place, so readers see a value whole
/// or not at all; `add` holds an exclusive `flock` on the directory's lock file.
/// The directory must be private (`0700`, ours, not a symlink): the store holds the
/// tokens that peers' sockets ask for.
///
/// A key is hex-encoded into its file name, or, when that name would be longer than
/// a file name may be (keys carry the group name, which torch does not bound), the
/// file is named after a digest of the key and holds the key in full before the
/// value: a read checks it, so two keys of one digest are an error, never each
/// other's value.
///
/// A full filesystem is named: a write that fails for space says which store, which
/// filesystem and how much room is left, and a gather still missing keys at its
/// deadline while the store's filesystem is (nearly) full says so instead of a bare
/// timeout, since the missing ranks most likely failed to write.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store in `dir`, created if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        crate::private_dir::ensure(&dir, "store directory", "the tokens in it", Phase::Publish)?;
        Ok(FileStore { dir })
    }

    /// A store in `$SYMMWIN_STORE_DIR`.
    pub fn from_env() -> Result<Self> {
        match std::env::var_os("SYMMWIN_STORE_DIR") {
            Some(dir) if !dir.is_empty() => FileStore::new(dir),
            _ => Err(Error::invalid("SYMMWIN_STORE_DIR is not set")),
        }
    }

    /// The directory holding the keys.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of keys currently set.
    pub fn len(&self) -> Result<usize> {
        Ok(fs::read_dir(&self.dir)
            .map_err(|e| Error::os(Phase::Publish, "readdir(store)", e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('k'))
            .count())
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// The directory is checked again on every use: it may have been replaced or
    /// opened up since the store was made.
    fn checked(&self) -> Result<()> {
        crate::private_dir::verify(
            &self.dir,
            "store directory",
            "the tokens in it",
            Phase::Publish,
        )
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(file_name(key))
    }

    fn write_atomically(&self, path: &Path, value: &[u8]) -> Result<()> {
        let tmp = self.dir.join(format!(
            "tmp.{}.{:x}",
            std::process::id(),
            crate::token::random_u64()
        ));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(value)?;
            fs::rename(&tmp, path)
        })();
        result.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            self.write_failed(path, e)
        })
    }

    /// The error of a write to `path` that failed: a full filesystem is named with
    /// what is left on it, any other failure with the store's path.
    fn write_failed(&self, path: &Path, e: std::io::Error) -> Error {
        let file = symmwin_device::text::clip(&path.to_string_lossy());
        if is_out_of_space(&e) {
            let fs = Filesystem::of(&self.dir)
                .map_or_else(|| "its filesystem".to_owned(), |f| f.to_string());
            return Error::new(
                Phase::Publish,
                ErrorKind::Limit(format!(
                    "the filesystem of store {} is full: writing {file} failed ({e}); {fs}; \
                     free space there, or put the store on a larger filesystem",
                    symmwin_device::text::clip(&self.dir.to_string_lossy())
                )),
            );
        }
        Error::new(
            Phase::Publish,
            ErrorKind::Store(format!("write({file}) failed: {e}")),
        )
    }

    /// `key`'s value from the bytes of its file, checking the key a digest-named file
    /// holds.
    fn value_of(&self, key: &str, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        if !is_digest_named(key) {
            return Ok(bytes);
        }
        let held = held_key(&bytes).map(|k| (k.len(), k == key.as_bytes()));
        match held {
            Some((len, true)) => {
                bytes.drain(..KEY_HEADER.len() + 8 + len);
                Ok(bytes)
            }
            Some((_, false)) => Err(self.collision(key, &bytes)),
            None => Err(Error::new(
                Phase::Gather,
                ErrorKind::Corrupt {
                    key: symmwin_device::text::clip(key),
                    detail: format!(
                        "{} does not start with the key it is named after",
                        self.path(key).display()
                    ),
                },
            )),
        }
    }

    fn collision(&self, key: &str, bytes: &[u8]) -> Error {
        let other = held_key(bytes)
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        Error::new(
            Phase::Gather,
            ErrorKind::Store(format!(
                "keys {} and {} share the digest file {}: use a shorter group name",
                symmwin_device::text::clip(key),
                symmwin_device::text::clip(&other),
                self.path(key).display()
            )),
        )
    }

    /// The bytes to write for `key`: the value, after the key itself for a file
    /// named by digest. Refuses to replace another key of the same digest.
    fn framed(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        if !is_digest_named(key) {
            return Ok(value.to_vec());
        }
        if let Ok(existing) = fs::read(self.path(key)) {
            if held_key(&existing).is_some_and(|k| k != key.as_bytes()) {
                return Err(self.collision(key, &existing).during(Phase::Publish));
            }
        }
        let mut framed = Vec::with_capacity(KEY_HEADER.len() + 8 + key.len() + value.len());
        framed.extend_from_slice(KEY_HEADER);
        framed.extend_from_slice(&(key.len() as u64).to_le_bytes());
        framed.extend_from_slice(key.as_bytes());
        framed.extend_from_slice(value);
        Ok(framed)
    }
}

/// Longest file name most filesystems take (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// What a digest-named file starts with, before the key's length and the key.
const KEY_HEADER: &[u8] = b"symmwin-key\0";

/// True when `key`'s hex name would be too long, so its file is named by digest.
fn is_digest_named(key: &str) -> bool {
    1 + 2 * key.len() > NAME_MAX
}

/// The file name of `key`: `k` and its bytes in hex (flat and unambiguous, since keys
/// contain '/'), or `kh` and a 128-bit digest of it ('h' is no hex digit).
fn file_name(key: &str) -> String {
    if is_digest_named(key) {
        return format!("kh{:032x}", digest(key.as_bytes()));
    }
    let mut name = String::with_capacity(1 + key.len() * 2);
    name.push('k');
    for b in key.bytes() {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// FNV-1a, 128 bits: only to spread names (a collision is detected on read, and only
/// we can write the directory), so no cryptographic hash is needed.
fn digest(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME))
}

/// The key a digest-named file holds, if it is framed as one.
fn held_key(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(KEY_HEADER)?;
    let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    rest.get(8..8 + usize::try_from(len).ok()?)
}

fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Free space under which a gather that misses keys blames the store's filesystem:
/// room for a few requests (each one file of a few KiB).
const NEARLY_FULL: u64 = 64 << 10;

/// The filesystem a directory lies on, as an error message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Filesystem {
    /// Where it is mounted (from `/proc/self/mountinfo`; empty when unknown).
    mount_point: String,
    /// Its type, e.g. `tmpfs` (empty when unknown).
    fs_type: String,
    /// Bytes free to us.
    free: u64,
    /// Its size in bytes.
    size: u64,
    /// Inodes free to us (a tmpfs can run out of those first).
    free_inodes: u64,
}

impl Filesystem {
    fn of(dir: &Path) -> Option<Filesystem> {
        let stat = rustix::fs::statvfs(dir).ok()?;
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let canonical = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let (mount_point, fs_type) = mount_of(&mounts, &canonical).unwrap_or_default();
        Some(Filesystem {
            mount_point,
            fs_type,
            free: stat.f_bavail.saturating_mul(stat.f_frsize),
            size: stat.f_blocks.saturating_mul(stat.f_frsize),
            free_inodes: stat.f_favail,
        })
    }

    fn nearly_full(&self) -> bool {
        self.free < NEARLY_FULL || self.free_inodes == 0
    }
}

impl std::fmt::Display for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match (self.fs_type.as_str(), self.mount_point.as_str()) {
            ("", "") => "its filesystem".to_owned(),
            (kind, at) => format!("{kind} mounted at {}", symmwin_device::text::clip(at)),
        };
        write!(
            f,
            "{what} has {} of {} bytes free and {} inode(s) free",
            self.free, self.size, self.free_inodes
        )
    }
}

/// The mount point and type of the mount `path` (canonical) lies under: the entry of
/// `/proc/self/mountinfo` with the longest mount point that contains it (later
/// entries win a tie, as later mounts hide earlier ones).
fn mount_of(mountinfo: &str, path: &Path) -> Option<(String, String)> {
    let unescape = |field: &str| field.replace("\\040", " ").replace("\\011", "\t");
    mountinfo
        .lines()
        .filter_map(|line| {
            let (front, back) = line.split_once(" - ")?;
            let mount_point = unescape(front.split(' ').nth(4)?);
            let fs_type = back.split(' ').next()?.to_owned();
            path.starts_with(&mount_point)
                .then_some((mount_point, fs_type))
        })
        .fold(None, |best: Option<(String, String)>, entry| match best {
            Some(b) if b.0.len() > entry.0.len() => Some(b),
            _ => Some(entry),
        })
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.checked()?;
        let framed = self.framed(key, value)?;
        self.write_atomically(&self.path(key), &framed)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.checked()?;
        match fs::read(self.path(key)) {
            Ok(v) => self.value_of(key, v).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::os(Phase::Gather, "read(store)", e)),
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.checked()?;
        let lock = fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("lock"))
            .map_err(|e| Error::os(Phase::Publish, "open(store lock)", e))?;
        rustix::fs::flock(&lock, FlockOperation::LockExclusive)
            .map_err(|e| Error::os(Phase::Publish, "flock(store)", e))?;
        let path = self.path(key);
        let current = match self.try_get(key)? {
            Some(v) => parse_counter(key, &v)?,
            None => 0,
        };
        let next = current.checked_add(delta).ok_or_else(|| {
            Error::new(
                Phase::Publish,
                ErrorKind::Store(format!("counter {key} overflows")),
            )
        })?;
        let framed = self.framed(key, next.to_string().as_bytes())?;
        self.write_atomically(&path, &framed)?;
        Ok(next)
    }

    fn delete(&self, key: &str) -> Result<()> {
        // Never remove another key's file of the same digest.
        if is_digest_named(key) {
            match fs::read(self.path(key)) {
                Ok(bytes) if held_key(&bytes).is_some_and(|k| k != key.as_bytes()) => {
                    return Err(self.collision(key, &bytes).during(Phase::Teardown));
                }
                _ => {}
            }
        }
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::os(Phase::Teardown, "unlink(store)", e)),
        }
    }

    fn describe(&self) -> Option<String> {
        Some(format!("store {}", self.dir.display()))
    }

    fn wait_all(&self, keys: &[String], timeout: Duration) -> Result<Vec<Option<Vec<u8>>>> {
        let values = super::poll_all(self, keys, timeout)?;
        if values.iter().all(Option::is_some) {
            return Ok(values);
        }
        // Ranks whose keys are missing at the deadline most likely failed to write
        // them when the filesystem is full: say that, on this rank too.
        match Filesystem::of(&self.dir).filter(Filesystem::nearly_full) {
            Some(fs) => Err(self.missing_on_full_filesystem(keys, &values, &fs)),
            None => Ok(values),
        }
    }
}

impl FileStore {
    fn missing_on_full_filesystem(
        &self,
        keys: &[String],
        values: &[Option<Vec<u8>>],
        fs: &Filesystem,
    ) -> Error {
        let missing: Vec<&str> = keys
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.as_str())
            .collect();
        Error::new(
            Phase::Gather,
            ErrorKind::Limit(format!(
                "the filesystem of store {} is full, and {} key(s) never appeared (such as \
                 {}): their ranks most likely failed to write them; {fs}; free space there, \
                 or put the store on a larger filesystem",
                symmwin_device::text::clip(&self.dir.to_string_lossy()),
                missing.len(),
                symmwin_device::text::clip(missing.first().copied().unwrap_or_default())
            )),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(tag: &str) -> (PathBuf, FileStore) {
        let root = std::env::temp_dir().join(format!(
            "symmwin-store-{tag}-{}-{:x}",
            std::process::id(),
            crate::token::random_u64()
        ));
        let store = FileStore::new(root.join("s")).unwrap();
        (root, store)
    }

    #[test]
    fn a_store_directory_others_can_read_is_refused() {
        let (root, store) = scratch("mode");
        let fresh = root.join("s");
        let mode = fs::metadata(store.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        store.set("k/1", b"v").unwrap();
        assert_eq!(store.try_get("k/1").unwrap(), Some(b"v".to_vec()));
        assert_eq!(store.add("n", 5).unwrap(), 5);
        store.delete("k/1").unwrap();
        assert_eq!(store.try_get("k/1").unwrap(), None);

        fs::set_permissions(&fresh, fs::Permissions::from_mode(0o755)).unwrap();
        // A store already open sees the change on its next use.
        let err = store.try_get("k/1").unwrap_err().to_string();
        assert!(err.contains("must be 0700"), "{err}");
        assert!(store.set("k/2", b"v").is_err());
        let err = FileStore::new(&fresh).unwrap_err().to_string();
        assert!(
            err.contains("store directory") && err.contains("must be 0700"),
            "{err}"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn keys_of_any_length_are_set_read_added_and_deleted() {
        let (root, store) = scratch("long");
        for len in [1, 126, 127, 128, 300, 5000, 100_000] {
            let key = format!("symmwin/{}/0/req/1", "g".repeat(len));
            store.set(&key, b"value").unwrap();
            assert_eq!(
                store.try_get(&key).unwrap(),
                Some(b"value".to_vec()),
                "{len}"
            );
            let counter = format!("{key}/n");
            assert_eq!(store.add(&counter, 2).unwrap(), 2);
            assert_eq!(store.add(&counter, 3).unwrap(), 5);
            // A key that differs in its last byte is another key.
            let twin = format!("{}2", &key[..key.len() - 1]);
            assert_eq!(store.try_get(&twin).unwrap(), None);
            store.delete(&key).unwrap();
            store.delete(&counter).unwrap();
            assert_eq!(store.try_get(&key).unwrap(), None);
        }
        assert!(store.is_empty().unwrap());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn two_keys_of_one_digest_file_are_an_error_not_each_others_value() {
        let (root, store) = scratch("collide");
        let key = "k".repeat(300);
        let other = "o".repeat(300);
        // Plant `other` under `key`'s digest name: what a digest collision would leave.
        store.set(&other, b"theirs").unwrap();
        fs::rename(store.path(&other), store.path(&key)).unwrap();
        let err = store.try_get(&key).unwrap_err().to_string();
        assert!(err.contains("share the digest file"), "{err}");
        assert!(err.len() < 1500, "{} bytes", err.len());
        assert!(store.set(&key, b"ours").is_err());
        assert!(store.delete(&key).is_err());
        // A digest-named file that does not hold a key is corrupt.
        fs::write(store.path(&key), b"plain").unwrap();
        let err = store.try_get(&key).unwrap_err().to_string();
        assert!(err.contains("does not start with the key"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_full_filesystem_is_named_with_the_store_path() {
        let (root, store) = scratch("full");
        let fs = Filesystem {
            mount_point: "/dev/shm".into(),
            fs_type: "tmpfs".into(),
            free: 0,
            size: 65536,
            free_inodes: 3,
        };
        assert!(fs.nearly_full());
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let err = store.write_failed(&store.path("k/1"), enospc).to_string();
        assert!(
            err.contains(&format!(
                "the filesystem of store {} is full",
                store.dir().display()
            )) && err.contains("No space left on device")
                && err.contains(&file_name("k/1")),
            "{err}"
        );
        let keys = vec!["a".to_owned(), "symmwin/g/0/req/3".to_owned()];
        let err = store
            .missing_on_full_filesystem(&keys, &[Some(vec![]), None], &fs)
            .to_string();
        assert!(
            err.contains("1 key(s) never appeared (such as symmwin/g/0/req/3)")
                && err.contains("tmpfs mounted at /dev/shm has 0 of 65536 bytes free"),
            "{err}"
        );
        let other = std::io::Error::from_raw_os_error(libc::EIO);
        let err = store.write_failed(&store.path("k/1"), other).to_string();
        assert!(err.contains(&store.dir().display().to_string()), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_mount_a_path_lies_under_is_found() {
        let mountinfo = "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n\
                         30 22 0:25 / /dev/shm rw,nosuid - tmpfs tmpfs rw\n\
                         31 22 0:26 / /dev/shm/a\\040b rw - tmpfs none rw\n";
        let at = |p: &str| mount_of(mountinfo, Path::new(p));
        assert_eq!(
            at("/dev/shm/job"),
            Some(("/dev/shm".into(), "tmpfs".into()))
        );
        assert_eq!(at("/dev/shmx"), Some(("/".into(), "ext4".into())));
        assert_eq!(
            at("/dev/shm/a b/c"),
            Some(("/dev/shm/a b".into(), "tmpfs".into()))
        );
        let here = Filesystem::of(&std::env::temp_dir()).unwrap();
        assert!(!here.fs_type.is_empty() && here.size > 0, "{here:?}");
    }
}
