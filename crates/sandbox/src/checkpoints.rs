//! Where hibernated sessions are kept: the seam between whatever runs sessions (which makes and
//! reads a session's image: its workspace and its Python state, as opaque bytes) and whatever
//! keeps those images (which seals, compresses and stores them: a directory, object storage).
//!
//! A store never looks inside an image, and whatever runs sessions never sees how it is kept.
//! An image is written whole or not at all; the store keeps the previous one until a newer one
//! is whole, so a torn or damaged newest image falls back to the one before.

use std::time::SystemTime;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

/// The name an account's directory (of workspaces, of checkpoints) has on disk or in a bucket:
/// the id itself when it is plain (`[A-Za-z0-9_-]`, 1 to 128 bytes; ids are UUIDs), else `h.`
/// and the hex SHA-256 of it. A hashed name has a '.', which a plain one cannot, so the two
/// never meet.
pub fn account_dir_name(account: &str) -> String {
    let plain = !account.is_empty()
        && account.len() <= 128
        && account
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        account.to_owned()
    } else {
        format!("h.{}", hex::encode(Sha256::digest(account.as_bytes())))
    }
}

/// Whose image: the account and the caller's session id. Another account's same id is another
/// session, whose images this one never reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckpointKey {
    /// The account's id.
    pub account: String,
    /// The caller's session id (1 to [`crate::MAX_SESSION_ID_BYTES`] bytes).
    pub session_id: String,
}

/// One kept image, as its owner may see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointInfo {
    /// The caller's session id.
    pub session_id: String,
    /// What it takes in the store (sealed and compressed).
    pub stored_bytes: u64,
    /// When it was written.
    pub saved_at: SystemTime,
    /// Its version: higher is newer, per session.
    pub version: u64,
}

/// An image read back.
#[derive(Debug)]
pub struct LoadedCheckpoint {
    /// The image, as it was given to [`CheckpointStore::save`].
    pub image: Vec<u8>,
    /// Its version and size.
    pub info: CheckpointInfo,
    /// The newest image could not be read (torn, damaged, or sealed under a key this service
    /// does not have): this is the one before it.
    pub fell_back: bool,
}

/// Keeps sessions' images, sealed per account.
#[async_trait]
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Writes `image` as the session's newest, whole or not at all, and then drops every older
    /// image of it but the one before.
    async fn save(
        &self,
        key: &CheckpointKey,
        image: Vec<u8>,
    ) -> Result<CheckpointInfo, CheckpointError>;

    /// The session's newest image that opens (see [`LoadedCheckpoint::fell_back`]); `None` when
    /// it has none. [`CheckpointError::Unreadable`] when it has some and none opens.
    async fn load(&self, key: &CheckpointKey) -> Result<Option<LoadedCheckpoint>, CheckpointError>;

    /// Deletes every image of the session; `false` when it had none.
    async fn delete(&self, key: &CheckpointKey) -> Result<bool, CheckpointError>;

    /// The newest image of each of the account's sessions, ordered by session id.
    async fn list(&self, account: &str) -> Result<Vec<CheckpointInfo>, CheckpointError>;

    /// Deletes every image of every session (of any account) whose newest image was saved
    /// before `cutoff`; the number of sessions deleted.
    async fn expire(&self, cutoff: SystemTime) -> Result<u64, CheckpointError>;
}

/// Why a store could not do what was asked. Messages never hold an image's content, a key or a
/// secret; the source is for logs.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The store could not be reached or written (a disk, a network, a refused credential).
    #[error("the checkpoint store is unavailable: {0}")]
    Unavailable(String),
    /// Every image of the session is damaged or sealed under a key this service does not have.
    #[error("the session's checkpoint could not be read: {0}")]
    Unreadable(String),
    /// The image is larger than the store takes.
    #[error("the session's checkpoint has {bytes} bytes, more than the {max} a checkpoint may")]
    TooLarge {
        /// the image's size
        bytes: u64,
        /// the limit
        max: u64,
    },
}
