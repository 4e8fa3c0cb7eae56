//! Sessions that outlive their process: a session's image (its workspace and its Python state,
//! `image.rs`) is handed to the checkpoint store when it hibernates (idle for
//! [`Keeping::hibernate_after`]), after a call once [`Keeping::checkpoint_every`] has passed
//! since its last checkpoint, and at shutdown; a call to a session this process does not hold
//! restores it from its newest checkpoint first.
//!
//! The server never reads the Python state: the session writes it to a file of its workspace,
//! and a restored session reads it back from there (`keep.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use toolgate_sandbox::{CheckpointInfo, CheckpointKey, NotRestored, Restored};

use crate::image::{self, ImageMeta};
use crate::incarnation::{Live, blocking};
use crate::keep::{Keep, KeepAnswer, STATE_FILE};
use crate::manager_types::Keeping;
use crate::session_error::human_bytes;
use crate::session_table::{Entry, ManagerState, Name, Slot};

/// How long a session may take to write or read its Python state before it is killed.
const KEEP_LIMIT: Duration = Duration::from_secs(120);

/// The image format this server writes.
const IMAGE_FORMAT: u32 = 1;

fn key_of(entry: &Entry) -> Option<CheckpointKey> {
    match &entry.name {
        Name::Caller(id) => Some(CheckpointKey {
            account: entry.account.clone(),
            session_id: id.clone(),
        }),
        Name::Call(_) => None,
    }
}

/// Writes the session's image to the store: its Python state (when its process lives and can)
/// and its workspace. Its processes go on; the caller holds its slot.
pub(crate) async fn checkpoint(
    inner: &Arc<ManagerState>,
    entry: &Entry,
    slot: &Slot,
) -> Result<CheckpointInfo, String> {
    let (Some(keeping), Some(key)) = (inner.config.keeping.as_ref(), key_of(entry)) else {
        return Err("checkpoints are off".to_owned());
    };
    let state_error = match slot.live.as_ref().filter(|l| l.session.is_alive()) {
        Some(live) => match live.session.keep(Keep::Checkpoint, KEEP_LIMIT).await {
            Ok(_) => None,
            Err(e) => Some(format!("the Python state could not be written: {e}")),
        },
        None => Some("the session's process had ended".to_owned()),
    };
    let meta = ImageMeta {
        format: IMAGE_FORMAT,
        state_error,
        env_names: entry.env_names(),
    };
    let _permit = inner
        .image_work
        .acquire()
        .await
        .map_err(|_| "the manager is shutting down".to_owned())?;
    let workspace = entry.place.workspace.clone();
    let max = keeping.max_image_bytes;
    let image = blocking(move || {
        let image = image::pack(&workspace, &meta, max);
        // the state is in the image now; the workspace is the session's again
        let _ = std::fs::remove_file(workspace.join(STATE_FILE));
        image
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("the workspace could not be archived: {e}"))?;
    let started = Instant::now();
    let info = keeping
        .store
        .save(&key, image)
        .await
        .map_err(|e| e.to_string())?;
    entry.checkpointed();
    within_quota(inner, keeping, &key.account).await;
    tracing::debug!(
        bytes = info.stored_bytes,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "session checkpointed"
    );
    Ok(info)
}

/// Restores the session of a new entry from its newest checkpoint, if it has one, into `live`
/// (just started, nothing run in it yet). `None`: there was none (or checkpoints are off).
pub(crate) async fn restore(
    inner: &Arc<ManagerState>,
    entry: &Entry,
    live: &Live,
) -> Option<Restoring> {
    let keeping = inner.config.keeping.as_ref()?;
    let key = key_of(entry)?;
    let permit = inner.image_work.acquire().await.ok()?;
    let loaded = match keeping.store.load(&key).await {
        Ok(Some(loaded)) => loaded,
        Ok(None) if take_dropped(inner, &key.account, &key.session_id) => {
            return Some(Restoring::Lost(format!(
                "its checkpoint was deleted to keep the account within its checkpoint quota of {} \
                 (the oldest hibernated sessions go first)",
                human_bytes(keeping.account_quota_bytes)
            )));
        }
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("a session's checkpoint could not be read: {e}");
            return Some(Restoring::Lost(format!(
                "its checkpoint could not be read ({e}); this is a fresh session"
            )));
        }
    };
    let workspace = entry.place.workspace.clone();
    let owner = inner.give_away.then_some(entry.place.uid);
    let charge = live.charge_dir();
    let image = loaded.image;
    let unpacked =
        blocking(move || image::unpack(&image, &workspace, owner, charge.as_deref())).await;
    drop(permit);
    let meta = match unpacked {
        Ok(Ok(meta)) => meta,
        Ok(Err(e)) => {
            return Some(Restoring::Lost(format!(
                "its files could not be restored: {e}"
            )));
        }
        Err(e) => {
            return Some(Restoring::Lost(format!(
                "its files could not be restored: {e}"
            )));
        }
    };
    let whole = |reason: String| NotRestored {
        name: "*".to_owned(),
        type_name: String::new(),
        reason,
    };
    let not_restored = match meta.state_error {
        Some(why) => vec![whole(why)],
        None => match live.session.keep(Keep::Restore, KEEP_LIMIT).await {
            Ok(KeepAnswer::Restored { not_restored, .. }) => not_restored,
            Ok(KeepAnswer::Checkpointed { .. }) => {
                vec![whole("the session answered out of turn".to_owned())]
            }
            Err(e) => vec![whole(format!(
                "the Python state could not be read back: {e}"
            ))],
        },
    };
    entry.checkpointed();
    entry.given_env(meta.env_names.iter());
    Some(Restoring::Done(Restored {
        saved_at: loaded.info.saved_at,
        fell_back: loaded.fell_back,
        not_restored,
        env_names: meta.env_names,
    }))
}

/// What restoring a session came to.
pub(crate) enum Restoring {
    /// restored (maybe in part: see `not_restored`)
    Done(Restored),
    /// it had a checkpoint, and nothing of it could be brought back: why
    Lost(String),
}

/// Deletes the session's checkpoints (it was closed by its owner).
pub(crate) async fn forget(inner: &ManagerState, account: &str, session_id: &str) -> bool {
    let Some(keeping) = inner.config.keeping.as_ref() else {
        return false;
    };
    let key = CheckpointKey {
        account: account.to_owned(),
        session_id: session_id.to_owned(),
    };
    match keeping.store.delete(&key).await {
        Ok(deleted) => deleted,
        Err(e) => {
            tracing::warn!("a closed session's checkpoints could not be deleted: {e}");
            false
        }
    }
}

/// Whether the account's session `session_id` has a checkpoint to restore.
pub(crate) async fn has_checkpoint(inner: &ManagerState, account: &str, session_id: &str) -> bool {
    let Some(keeping) = inner.config.keeping.as_ref() else {
        return false;
    };
    keeping
        .store
        .list(account)
        .await
        .is_ok_and(|kept| kept.iter().any(|info| info.session_id == session_id))
}

/// Whether `entry`, idle since `idle_since`, is due to hibernate at `now`.
pub(crate) fn due_to_hibernate(inner: &ManagerState, entry: &Entry, now: Instant) -> bool {
    let Some(keeping) = inner.config.keeping.as_ref() else {
        return false;
    };
    let failed_lately = entry
        .hibernation_failed()
        .is_some_and(|at| now.saturating_duration_since(at) < keeping.hibernate_after);
    matches!(entry.name, Name::Caller(_))
        && !failed_lately
        && now.saturating_duration_since(entry.idle_since()) >= keeping.hibernate_after
}

/// Whether `entry` is due for a checkpoint after a call.
pub(crate) fn due_for_checkpoint(inner: &ManagerState, entry: &Entry) -> bool {
    let Some(keeping) = inner.config.keeping.as_ref() else {
        return false;
    };
    matches!(entry.name, Name::Caller(_))
        && entry.last_checkpoint().elapsed() >= keeping.checkpoint_every
}

/// The age of a checkpoint written at `saved_at`.
pub(crate) fn age(saved_at: SystemTime) -> Duration {
    SystemTime::now()
        .duration_since(saved_at)
        .unwrap_or(Duration::ZERO)
}

/// Hibernates a session: checkpoints it, then ends its processes and removes its workspace. If
/// the checkpoint cannot be written the session lives on, and is tried again after another
/// [`Keeping::hibernate_after`] (or expires, as without checkpoints).
pub(crate) async fn hibernate(
    inner: Arc<ManagerState>,
    entry: Arc<Entry>,
    slot: tokio::sync::OwnedMutexGuard<Slot>,
) {
    match checkpoint(&inner, &entry, &slot).await {
        Ok(_) => crate::session_table::retire(inner, entry, slot, false).await,
        Err(e) => {
            // tried again a hibernation time later; past the idle time-to-live it expires
            tracing::warn!("a session could not hibernate (it stays live): {e}");
            entry.set_hibernation_failed(Some(Instant::now()));
        }
    }
}

/// Deletes the checkpoints past their retention, at most once per `period`.
pub(crate) async fn expire_old(inner: &ManagerState) {
    let Some(keeping) = inner.config.keeping.as_ref() else {
        return;
    };
    let Some(cutoff) = SystemTime::now().checked_sub(keeping.retention) else {
        return;
    };
    match keeping.store.expire(cutoff).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(sessions = n, "checkpoints past their retention deleted"),
        Err(e) => tracing::warn!("old checkpoints could not be deleted: {e}"),
    }
}

/// How long a dropped session's id is remembered (listed, and said at its next call).
const DROPPED_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Drops the account's oldest hibernated sessions while its checkpoints take more than its
/// quota; live sessions' checkpoints are never dropped.
async fn within_quota(inner: &ManagerState, keeping: &Keeping, account: &str) {
    if keeping.account_quota_bytes == 0 {
        return;
    }
    let Ok(mut kept) = keeping.store.list(account).await else {
        return;
    };
    let mut total: u64 = kept.iter().map(|info| info.stored_bytes).sum();
    if total <= keeping.account_quota_bytes {
        return;
    }
    kept.sort_by_key(|info| info.saved_at);
    for info in kept {
        if total <= keeping.account_quota_bytes {
            break;
        }
        if inner.lookup(account, &info.session_id).is_some() {
            continue; // live here: its checkpoint is its safety net
        }
        let key = CheckpointKey {
            account: account.to_owned(),
            session_id: info.session_id.clone(),
        };
        match keeping.store.delete(&key).await {
            Ok(_) => {
                total = total.saturating_sub(info.stored_bytes);
                tracing::info!(
                    bytes = info.stored_bytes,
                    "a hibernated session dropped for its account's checkpoint quota"
                );
                inner.note_dropped(account, &info.session_id);
            }
            Err(e) => {
                tracing::warn!("a checkpoint over the quota could not be deleted: {e}");
                return;
            }
        }
    }
}

/// The account's sessions dropped for the quota lately, with when.
pub(crate) fn dropped_of(inner: &ManagerState, account: &str) -> Vec<(String, SystemTime)> {
    let mut dropped = inner.dropped();
    dropped.retain(|_, at| age(*at) < DROPPED_TTL);
    dropped
        .iter()
        .filter(|((a, _), _)| a == account)
        .map(|((_, id), at)| (id.clone(), *at))
        .collect()
}

/// Whether `session_id` of `account` was dropped for the quota (forgotten once asked: its next
/// call says so once, then it is a session like any other).
pub(crate) fn take_dropped(inner: &ManagerState, account: &str, session_id: &str) -> bool {
    inner
        .dropped()
        .remove(&(account.to_owned(), session_id.to_owned()))
        .is_some()
}
