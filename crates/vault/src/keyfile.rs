//! Where the master keys come from: a setting (fixed for the life of the process) or a key file,
//! which the rotation command rewrites with one more version while the service runs. The
//! service notices a rewritten file by its size, time and inode before sealing, and re-reads it
//! whenever it meets a version it does not have.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use zeroize::Zeroizing;

use crate::VaultError;
use crate::keys::MasterKeys;

/// The master keys' origin.
#[derive(Debug)]
pub enum KeySource {
    /// Given whole by a setting; never changes while the process runs.
    Given(MasterKeys),
    /// A key file.
    File(KeyFile),
}

impl KeySource {
    pub(crate) fn load(&self) -> Result<MasterKeys, VaultError> {
        match self {
            Self::Given(keys) => Ok(keys.clone()),
            Self::File(file) => file.read(),
        }
    }

    /// The keys again if the source may have changed (always with `force`); `None` if not.
    pub(crate) fn reload(&self, force: bool) -> Result<Option<MasterKeys>, VaultError> {
        match self {
            Self::Given(_) => Ok(None),
            Self::File(file) if force || file.changed() => file.read().map(Some),
            Self::File(_) => Ok(None),
        }
    }
}

/// What identifies one version of the file on disk.
type Stamp = (u64, u64, i64, i64);

/// The key file: `v<N> <base64>` lines, mode 0600.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    seen: Mutex<Option<Stamp>>,
}

impl KeyFile {
    /// The file at `path` (which may not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            seen: Mutex::new(None),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it exists.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Creates the file with a fresh version-1 key; refuses if it exists.
    pub fn create(&self) -> Result<MasterKeys, VaultError> {
        let keys = MasterKeys::generate()?;
        self.write_new(&self.path, &keys.render())?;
        self.remember();
        Ok(keys)
    }

    /// Reads the keys.
    pub fn read(&self) -> Result<MasterKeys, VaultError> {
        let text = Zeroizing::new(fs::read_to_string(&self.path).map_err(|e| self.io(e))?);
        let keys = MasterKeys::parse(&text)?;
        self.remember();
        Ok(keys)
    }

    /// Adds a fresh key under the next version (it seals from now on) and replaces the file
    /// atomically; returns the keys now in it.
    pub fn add_version(&self) -> Result<MasterKeys, VaultError> {
        let keys = self.read()?.with_new_version()?;
        let staged = self.path.with_extension("new");
        // a staged file left by a crashed rotation holds a key nothing was sealed with
        match fs::remove_file(&staged) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(self.io(err)),
        }
        self.write_new(&staged, &keys.render())?;
        fs::rename(&staged, &self.path).map_err(|e| self.io(e))?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.io(e))?;
        }
        self.remember();
        Ok(keys)
    }

    fn write_new(&self, path: &Path, text: &str) -> Result<(), VaultError> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| self.io(e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| self.io(e))
    }

    fn stamp(&self) -> Option<Stamp> {
        let meta = fs::metadata(&self.path).ok()?;
        Some((meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec()))
    }

    fn remember(&self) {
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = self.stamp();
    }

    fn changed(&self) -> bool {
        let now = self.stamp();
        now.is_some() && *self.seen.lock().unwrap_or_else(PoisonError::into_inner) != now
    }

    fn io(&self, source: std::io::Error) -> VaultError {
        VaultError::KeyFileIo {
            path: self.path.display().to_string(),
            source,
        }
    }
}
