//! Where hibernated sessions are kept: [`ObjectCheckpoints`], the [`CheckpointStore`] over a
//! directory (`file://`) or S3-compatible object storage (`s3://`).
//!
//! Each image is compressed (zstd), then sealed by the vault for its account, bound to its
//! session id and version ([`toolgate_vault::Vault::seal_blob`]): nothing in the store is
//! readable without the vault's master keys, and an object copied to another account, session
//! or version does not open. Names hold the account id and the hex session id (see `layout`).
//!
//! A save writes its object whole or not at all (a temporary file renamed, or one S3 PUT) under
//! a version higher than any the session has, then deletes the session's older objects but
//! the one before, which a load falls back to when the newest does not open.

mod image;
mod layout;
mod location;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};
use toolgate_sandbox::{
    CheckpointError, CheckpointInfo, CheckpointKey, CheckpointStore, LoadedCheckpoint,
};
use toolgate_vault::Vault;

use crate::layout::{Layout, Place};
use crate::location::Location;
pub use crate::location::S3Access;

/// The largest image a store takes (4 GiB).
pub const MAX_IMAGE_BYTES: u64 = 4 << 30;

/// How often a load lists again when the object it chose was deleted meanwhile (by saves that
/// made two newer ones).
const LOAD_ATTEMPTS: usize = 3;

/// The versions this process gave out last: a save in the same nanosecond as another, or after
/// a clock step back, still gets a higher one.
static LAST_VERSION: AtomicU64 = AtomicU64::new(0);

/// Keeps sessions' images in a directory or a bucket, sealed per account.
pub struct ObjectCheckpoints {
    objects: Arc<dyn ObjectStore>,
    layout: Layout,
    vault: Arc<Vault>,
    /// What the store was opened with, for messages: the scheme and bucket or path only.
    shown_as: String,
    /// Struck from every message, should a library's error ever echo it.
    secret: Option<toolgate_vault::Zeroizing<String>>,
    max_image: u64,
}

impl std::fmt::Debug for ObjectCheckpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCheckpoints")
            .field("at", &self.shown_as)
            .finish_non_exhaustive()
    }
}

/// One stored version of a session.
struct Stored {
    place: Place,
    meta: ObjectMeta,
}

impl ObjectCheckpoints {
    /// The store `url` names (`file:///abs/dir` or `s3://bucket/prefix`, with `s3` to reach
    /// it), sealing with `vault`. Checks that it can write there: a directory is created with
    /// mode 0700, and a probe object is written and deleted. Errors never show a credential.
    pub async fn open(
        url: &str,
        s3: &S3Access,
        vault: Arc<Vault>,
    ) -> Result<Self, CheckpointError> {
        Self::open_at(Location::parse(url)?, s3, vault).await
    }

    /// [`ObjectCheckpoints::open`] of `file://<dir>` (`dir` absolute).
    pub async fn open_directory(dir: PathBuf, vault: Arc<Vault>) -> Result<Self, CheckpointError> {
        if !dir.is_absolute() {
            return Err(CheckpointError::Unavailable(format!(
                "the checkpoint directory {} is not an absolute path",
                dir.display()
            )));
        }
        Self::open_at(Location::File(dir), &S3Access::default(), vault).await
    }

    /// [`ObjectCheckpoints::open`] of `s3://<bucket>/<prefix>`.
    pub async fn open_bucket(
        bucket: &str,
        prefix: &str,
        s3: &S3Access,
        vault: Arc<Vault>,
    ) -> Result<Self, CheckpointError> {
        Self::open_at(Location::bucket(bucket, prefix)?, s3, vault).await
    }

    async fn open_at(
        location: Location,
        s3: &S3Access,
        vault: Arc<Vault>,
    ) -> Result<Self, CheckpointError> {
        let secret = matches!(location, Location::S3 { .. })
            .then(|| s3.secret_access_key.clone())
            .filter(|secret| !secret.is_empty());
        let shown_as = match &location {
            Location::File(dir) => format!("file://{}", dir.display()),
            Location::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        };
        let connected = match &location {
            // creating a directory blocks
            Location::File(_) => {
                let location = location.clone();
                let s3 = s3.clone();
                tokio::task::spawn_blocking(move || location.connect(&s3))
                    .await
                    .map_err(|e| CheckpointError::Unavailable(e.to_string()))?
            }
            Location::S3 { .. } => location.connect(s3),
        };
        let (objects, prefix) =
            connected.map_err(|e| redact_error(e, secret.as_deref().map(String::as_str)))?;
        let store = Self {
            objects,
            layout: Layout::new(&prefix),
            vault,
            shown_as,
            secret,
            max_image: MAX_IMAGE_BYTES,
        };
        store.probe().await?;
        Ok(store)
    }

    /// The same store taking images of at most `max` bytes (at most [`MAX_IMAGE_BYTES`]).
    pub fn with_max_image_bytes(mut self, max: u64) -> Self {
        self.max_image = max.min(MAX_IMAGE_BYTES);
        self
    }

    async fn probe(&self) -> Result<(), CheckpointError> {
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).map_err(|_| {
            CheckpointError::Unavailable("no randomness for a probe object's name".to_owned())
        })?;
        let probe = self.layout.probe(&hex::encode(token));
        self.objects
            .put(&probe, PutPayload::from_static(b"probe"))
            .await
            .map_err(|e| self.unavailable("cannot write to", &e))?;
        self.objects
            .delete(&probe)
            .await
            .map_err(|e| self.unavailable("cannot delete from", &e))
    }

    /// An `Unavailable` naming the store and what failed, with the secret struck out.
    fn unavailable(&self, what: &str, error: &dyn std::fmt::Display) -> CheckpointError {
        redact_error(
            CheckpointError::Unavailable(format!("{what} {}: {error}", self.shown_as)),
            self.secret.as_deref().map(String::as_str),
        )
    }

    /// Every stored version under `prefix` that is a version's object, as listed now.
    async fn stored(&self, prefix: &Path) -> Result<Vec<Stored>, CheckpointError> {
        let listed: Vec<ObjectMeta> = self
            .objects
            .list(Some(prefix))
            .try_collect()
            .await
            .or_else(|e| match e {
                // a directory not made yet (file://) holds nothing
                object_store::Error::NotFound { .. } => Ok(Vec::new()),
                e => Err(self.unavailable("cannot list", &e)),
            })?;
        Ok(listed
            .into_iter()
            .filter_map(|meta| {
                let place = self.layout.place(&meta.location)?;
                Some(Stored { place, meta })
            })
            .collect())
    }

    /// The session's stored versions, newest first.
    async fn versions(&self, key: &CheckpointKey) -> Result<Vec<Stored>, CheckpointError> {
        let mut stored = self
            .stored(&self.layout.session(&key.account, &key.session_id))
            .await?;
        stored.retain(|s| s.place.is_of(&key.account, &key.session_id));
        stored.sort_by_key(|s| std::cmp::Reverse(s.place.version));
        Ok(stored)
    }

    async fn delete_object(&self, path: &Path) -> Result<(), CheckpointError> {
        match self.objects.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unavailable("cannot delete from", &e)),
        }
    }

    /// Reads and opens one stored version; `Ok(None)` when it was deleted meanwhile.
    async fn read(
        &self,
        key: &CheckpointKey,
        stored: &Stored,
    ) -> Result<Option<Result<LoadedCheckpoint, String>>, CheckpointError> {
        let got = match self.objects.get(&stored.meta.location).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.unavailable("cannot read from", &e)),
        };
        let meta = got.meta.clone();
        let sealed = match got.bytes().await {
            Ok(sealed) => sealed,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.unavailable("cannot read from", &e)),
        };
        let (vault, key, version) = (self.vault.clone(), key.clone(), stored.place.version);
        let max = self.max_image;
        let opened = tokio::task::spawn_blocking(move || {
            image::open(&vault, &key.account, &key.session_id, version, &sealed, max)
                .map(|image| (image, key))
        })
        .await
        .map_err(|e| CheckpointError::Unavailable(e.to_string()))?;
        Ok(Some(opened.map(|(image, key)| LoadedCheckpoint {
            image,
            info: info(key.session_id, &meta, version),
            fell_back: false,
        })))
    }
}

fn info(session_id: String, meta: &ObjectMeta, version: u64) -> CheckpointInfo {
    CheckpointInfo {
        session_id,
        stored_bytes: meta.size,
        saved_at: meta.last_modified.into(),
        version,
    }
}

/// `error` with every occurrence of `secret` struck out of its message.
fn redact_error(error: CheckpointError, secret: Option<&str>) -> CheckpointError {
    match (error, secret) {
        (CheckpointError::Unavailable(message), Some(secret)) if message.contains(secret) => {
            CheckpointError::Unavailable(message.replace(secret, "[REDACTED]"))
        }
        (CheckpointError::Unreadable(message), Some(secret)) if message.contains(secret) => {
            CheckpointError::Unreadable(message.replace(secret, "[REDACTED]"))
        }
        (error, _) => error,
    }
}

/// A version above `newest` and above every one this process gave out: the clock's
/// nanoseconds when they are higher, so versions also order saves across restarts.
fn next_version(newest: Option<u64>) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let floor = newest.map_or(0, |v| v.saturating_add(1)).max(now);
    let mut chosen = floor;
    let _ = LAST_VERSION.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        chosen = floor.max(last.saturating_add(1));
        Some(chosen)
    });
    chosen
}

#[async_trait]
impl CheckpointStore for ObjectCheckpoints {
    async fn save(
        &self,
        key: &CheckpointKey,
        image: Vec<u8>,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let bytes = image.len() as u64;
        if bytes > self.max_image {
            return Err(CheckpointError::TooLarge {
                bytes,
                max: self.max_image,
            });
        }
        let newest = self.versions(key).await?.first().map(|s| s.place.version);
        let version = next_version(newest);
        let (vault, owned_key) = (self.vault.clone(), key.clone());
        let sealed = tokio::task::spawn_blocking(move || {
            image::seal(
                &vault,
                &owned_key.account,
                &owned_key.session_id,
                version,
                &image,
            )
        })
        .await
        .map_err(|e| CheckpointError::Unavailable(e.to_string()))?
        .map_err(|e| CheckpointError::Unavailable(format!("cannot seal the checkpoint: {e}")))?;
        let stored_bytes = sealed.len() as u64;
        let path = self
            .layout
            .object(&Place::new(&key.account, &key.session_id, version));
        self.objects
            .put(&path, PutPayload::from(sealed))
            .await
            .map_err(|e| self.unavailable("cannot write to", &e))?;
        let saved_at = SystemTime::now();

        // keep this one and the one below it: a save racing this one keeps its own pair
        let older: Vec<Stored> = self
            .versions(key)
            .await?
            .into_iter()
            .filter(|s| s.place.version < version)
            .collect();
        for stale in older.iter().skip(1) {
            self.delete_object(&stale.meta.location).await?;
        }
        Ok(CheckpointInfo {
            session_id: key.session_id.clone(),
            stored_bytes,
            saved_at,
            version,
        })
    }

    async fn load(&self, key: &CheckpointKey) -> Result<Option<LoadedCheckpoint>, CheckpointError> {
        for _ in 0..LOAD_ATTEMPTS {
            let versions = self.versions(key).await?;
            if versions.is_empty() {
                return Ok(None);
            }
            let mut failures = Vec::new();
            let mut vanished = false;
            for (fell_back, stored) in [false, true].into_iter().zip(&versions) {
                match self.read(key, stored).await? {
                    Some(Ok(mut loaded)) => {
                        loaded.fell_back = fell_back;
                        return Ok(Some(loaded));
                    }
                    Some(Err(why)) => {
                        failures.push(format!("version {:016x}: {why}", stored.place.version));
                    }
                    None => {
                        vanished = true;
                        break;
                    }
                }
            }
            if !vanished {
                return Err(CheckpointError::Unreadable(failures.join("; ")));
            }
        }
        Err(CheckpointError::Unavailable(format!(
            "the session's checkpoints in {} kept changing while it was read",
            self.shown_as
        )))
    }

    async fn delete(&self, key: &CheckpointKey) -> Result<bool, CheckpointError> {
        let versions = self.versions(key).await?;
        for stored in &versions {
            self.delete_object(&stored.meta.location).await?;
        }
        Ok(!versions.is_empty())
    }

    async fn list(&self, account: &str) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        let mut newest: BTreeMap<String, Stored> = BTreeMap::new();
        let dir = layout::account_dir(account);
        for stored in self.stored(&self.layout.account(account)).await? {
            let session_id = stored.place.session_id();
            let Some(session_id) = session_id.filter(|_| stored.place.account_dir == dir) else {
                continue;
            };
            match newest.get(&session_id) {
                Some(known) if known.place.version >= stored.place.version => {}
                _ => {
                    newest.insert(session_id, stored);
                }
            }
        }
        Ok(newest
            .into_iter()
            .map(|(session_id, s)| info(session_id, &s.meta, s.place.version))
            .collect())
    }

    async fn expire(&self, cutoff: SystemTime) -> Result<u64, CheckpointError> {
        let mut sessions: BTreeMap<(String, String), Vec<Stored>> = BTreeMap::new();
        for stored in self.stored(&self.layout.root()).await? {
            let session = (
                stored.place.account_dir.clone(),
                stored.place.session_hex.clone(),
            );
            sessions.entry(session).or_default().push(stored);
        }
        let mut expired = 0;
        for versions in sessions.values() {
            let Some(newest) = versions.iter().max_by_key(|s| s.place.version) else {
                continue;
            };
            if SystemTime::from(newest.meta.last_modified) >= cutoff {
                continue;
            }
            for stored in versions {
                self.delete_object(&stored.meta.location).await?;
            }
            expired += 1;
        }
        Ok(expired)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
