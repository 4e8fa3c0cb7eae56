//! The content-addressed file cache on the host: `<dir>/<sha256>`, written only by the service
//! (never by a session, which has no view of it), each file whole or absent: downloaded to a
//! temporary name, its SHA-256 checked against the index's, then renamed into place. Bounded in
//! bytes: after each store, the files used least recently (by access time, which every hit sets)
//! are removed until the cache fits.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// Prefix of files being written; never served, removed when found stale.
const TEMP_PREFIX: &str = ".part-";

/// The cache directory and its bound.
#[derive(Debug)]
pub(crate) struct FileStore {
    dir: PathBuf,
    max_bytes: u64,
    /// One download per file at a time: later askers wait for the first and then find it stored.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A file being written: bytes go in, [`Writing::finish`] checks and renames.
pub(crate) struct Writing {
    file: tokio::fs::File,
    temp: PathBuf,
    hasher: Sha256,
    written: u64,
    done: bool,
}

/// Why a download could not be stored. The message is for the session's code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error(
        "the file's SHA-256 is {actual}, not {expected} as the index says: it was not stored \
         and is not served"
    )]
    Mismatch { expected: String, actual: String },
    #[error("the package cache could not be written: {0}")]
    Io(#[from] io::Error),
}

impl FileStore {
    /// The cache in `dir` (made when missing), at most `max_bytes`; stale temporary files of an
    /// earlier process are removed.
    pub(crate) fn new(dir: PathBuf, max_bytes: u64) -> Self {
        // the service's alone: no session's uid may list or read it on the host
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Self {
            dir,
            max_bytes,
            inflight: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// The stored file `sha256` opened for reading, its use noted; `None` when not stored.
    pub(crate) async fn open(&self, sha256: &str) -> Option<(tokio::fs::File, u64)> {
        let file = std::fs::File::open(self.path(sha256)).ok()?;
        let length = file.metadata().ok()?.len();
        // the eviction's clock: set explicitly, as mounts with relatime or noatime would not
        let _ = file.set_times(std::fs::FileTimes::new().set_accessed(SystemTime::now()));
        Some((tokio::fs::File::from_std(file), length))
    }

    /// The lock of `sha256`'s download: held while it is fetched and stored.
    pub(crate) fn lock(&self, sha256: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        // entries nobody holds are dropped as new ones come, so the map stays small
        inflight.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(inflight.entry(sha256.to_owned()).or_default())
    }

    /// Starts writing the file `sha256` under a temporary name.
    pub(crate) async fn begin(&self, sha256: &str) -> io::Result<Writing> {
        let unique = std::process::id() as u128
            ^ SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
        let temp = self.dir.join(format!("{TEMP_PREFIX}{sha256}-{unique:x}"));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .await?;
        Ok(Writing {
            file,
            temp,
            hasher: Sha256::new(),
            written: 0,
            done: false,
        })
    }

    /// Removes the least recently used files until the cache fits, never `keep`.
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_file().then(|| {
                    let used = meta.accessed().or_else(|_| meta.modified()).ok()?;
                    Some((used, meta.len(), e.path()))
                })?
            })
            .collect();
        let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
        files.sort_by_key(|(used, _, _)| *used);
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

impl Writing {
    /// Appends `bytes`.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.written += bytes.len() as u64;
        self.file.write_all(bytes).await
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Checks the bytes against `sha256`, makes them durable and renames them into place; then
    /// evicts what the cache no longer has room for.
    pub(crate) async fn finish(
        mut self,
        store: &FileStore,
        sha256: &str,
    ) -> Result<(), StoreError> {
        let actual = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if actual != sha256 {
            return Err(StoreError::Mismatch {
                expected: sha256.to_owned(),
                actual,
            });
        }
        self.file.sync_all().await?;
        let target = store.path(sha256);
        tokio::fs::rename(&self.temp, &target).await?;
        self.done = true;
        store.evict(&target);
        Ok(())
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
