use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use super::memory::parse_counter;
use super::Store;
use crate::error::{Error, ErrorKind, Phase, Result};

/// A store in a directory shared by the ranks (one file per key).
///
/// Writes go to a temporary file renamed into place, so readers see a value whole
/// or not at all; `add` holds an exclusive `flock` on the directory's lock file.
/// The directory must be private (`0700`, ours, not a symlink): the store holds the
/// tokens that peers' sockets ask for.
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
        // Keys contain '/', so encode them into one flat, unambiguous file name.
        let mut name = String::with_capacity(1 + key.len() * 2);
        name.push('k');
        for b in key.bytes() {
            name.push_str(&format!("{b:02x}"));
        }
        self.dir.join(name)
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
            Error::os(Phase::Publish, "write(store)", e)
        })
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.checked()?;
        self.write_atomically(&self.path(key), value)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.checked()?;
        match fs::read(self.path(key)) {
            Ok(v) => Ok(Some(v)),
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
        self.write_atomically(&path, next.to_string().as_bytes())?;
        Ok(next)
    }

    fn delete(&self, key: &str) -> Result<()> {
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::os(Phase::Teardown, "unlink(store)", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_store_directory_others_can_read_is_refused() {
        let root = std::env::temp_dir().join(format!("symmwin-store-test-{}", std::process::id()));
        let fresh = root.join("fresh");
        let store = FileStore::new(&fresh).unwrap();
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
}
