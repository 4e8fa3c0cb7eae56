//! Session workspaces on disk: `<root>/<account>/<sha256 of the session id>` (and a sibling
//! `.tmp` for TMPDIR), private to the server's user, removed when the session ends.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::manager_types::ManagerError;

/// The directory name of a caller's session id: never the id itself, which the caller chose.
pub(super) fn session_dir_name(session_id: &str) -> String {
    hex::encode(Sha256::digest(session_id.as_bytes()))
}

/// An account's directory name: the id itself when it is plain (UUIDs are), else a hash; a
/// hashed name has a '.', which a plain one cannot, so the two never meet.
pub(super) fn account_dir_name(account: &str) -> String {
    let plain = account.len() <= 128
        && account
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        account.to_owned()
    } else {
        format!("h.{}", hex::encode(Sha256::digest(account.as_bytes())))
    }
}

/// Creates `dir` (and its account directory) with mode 0700, after removing whatever a crashed
/// earlier run left there: a new session starts with an empty workspace.
pub(super) async fn make_private_dir(dir: &Path) -> Result<(), ManagerError> {
    let failed = |source| ManagerError::Workspace {
        path: dir.to_path_buf(),
        source,
    };
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(failed)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            remove_tree(dir).await;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(failed)
        }
        Err(e) => Err(failed(e)),
    }
}

/// Removes a directory tree off the async threads; a tree the code made unwritable (chmod 000)
/// is opened up and removed again.
pub(super) async fn remove_tree(dir: &Path) {
    let dir = dir.to_path_buf();
    let removed = tokio::task::spawn_blocking(move || {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) => open_up(&dir),
        }
        std::fs::remove_dir_all(&dir).map_err(|e| (dir, e))
    })
    .await;
    if let Ok(Err((dir, e))) = removed {
        tracing::warn!(
            "could not remove the session directory {}: {e}",
            dir.display()
        );
    }
}

fn open_up(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(children) = std::fs::read_dir(dir) else {
        return;
    };
    for child in children.flatten() {
        // file_type does not follow symlinks: a link out of the workspace is never entered
        if child.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&child.path());
        }
    }
}
