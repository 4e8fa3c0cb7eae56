//! Session workspaces on disk: `<root>/<account>/<sha256 of the session id>` (and a sibling
//! `.tmp` for TMPDIR), private to the server's user, removed when the session ends. With the
//! privilege to mount, both are one size-capped tmpfs ([`QuotaMounts`]).

use std::ffi::CString;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};
use sha2::{Digest, Sha256};

use crate::manager_types::ManagerError;
use crate::zygote::WORKSPACE_MOUNT_SOURCE;

/// The directory name of a caller's session id: never the id itself, which the caller chose.
pub(super) fn session_dir_name(session_id: &str) -> String {
    hex::encode(Sha256::digest(session_id.as_bytes()))
}

/// An account's directory name (the seam's one rule, as checkpoints are named).
pub(super) fn account_dir_name(account: &str) -> String {
    toolgate_sandbox::account_dir_name(account)
}

/// Creates `dir` with mode 0700, after removing whatever a crashed earlier run left there: a new
/// session starts with an empty workspace. Its account directory and the root above it get mode
/// 0711: a hardened session runs as its own unprivileged uid, which must pass through both to
/// reach its workspace, but may not list them (other sessions' names stay hidden). Blocking.
fn make_private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(parent)?;
        // also when they already existed (0700 from an earlier version), whatever the umask
        for traversed in [Some(parent), parent.parent()].into_iter().flatten() {
            std::fs::set_permissions(traversed, std::fs::Permissions::from_mode(0o711))?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            remove_tree_now(dir);
            std::fs::DirBuilder::new().mode(0o700).create(dir)
        }
        Err(e) => Err(e),
    }
}

/// Makes a session's workspace and its `.tmp` sibling, empty and the session's: with `quota`,
/// one size-capped tmpfs of `size` bytes over both ([`QuotaMounts`]); else plain directories,
/// given to `uid` when the server may (`give_away`). Blocking.
pub(super) fn prepare_workspace(
    workspace: &Path,
    tmpdir: &Path,
    quota: bool,
    give_away: bool,
    size: u64,
    uid: u32,
) -> Result<Option<QuotaMounts>, ManagerError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ManagerError::Workspace { path, source }
    };
    for dir in [workspace, tmpdir] {
        if quota {
            // a mount left there by a crashed run would make the directory undeletable
            detach(dir);
        }
        make_private_dir(dir).map_err(failed(dir))?;
    }
    if quota {
        return QuotaMounts::mount(workspace, tmpdir, size, uid)
            .map(Some)
            .map_err(failed(workspace));
    }
    if give_away {
        give_to(workspace, uid)?;
        give_to(tmpdir, uid)?;
    }
    Ok(None)
}

/// Removes a directory tree off the async threads; see [`remove_tree_now`].
pub(super) async fn remove_tree(dir: &Path) {
    let dir = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || remove_tree_now(&dir)).await;
}

/// Removes a directory tree (blocking); a tree the code made unwritable (chmod 000) is opened up
/// and removed again. A failure is logged.
pub(super) fn remove_tree_now(dir: &Path) {
    let removed = match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            open_up(dir);
            std::fs::remove_dir_all(dir)
        }
    };
    if let Err(e) = removed {
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

/// A session's size-capped workspace: one tmpfs, its two halves bind-mounted over the workspace
/// and its `.tmp` sibling, so files and temporary files share one quota. Dropping it detaches
/// both mounts (lazily: a process still inside keeps what it has open, nothing more).
#[derive(Debug)]
pub(super) struct QuotaMounts {
    points: Vec<PathBuf>,
}

impl QuotaMounts {
    /// Mounts the tmpfs (`size` bytes, an inode per 4 KiB of it so that empty files cannot run up
    /// kernel memory, nosuid, nodev, owned by `uid`) and binds it over `workspace` and `tmpdir`,
    /// which must exist. Blocking. Its pages are charged to the memory cgroup of whoever writes
    /// them: the session's own files count towards its memory limit too.
    pub(super) fn mount(workspace: &Path, tmpdir: &Path, size: u64, uid: u32) -> io::Result<Self> {
        let staging = sibling(workspace, ".fs");
        detach(&staging);
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
        let mut mounts = Self { points: Vec::new() };
        let result = (|| {
            let inodes = (size / 4096).max(1024);
            let data = CString::new(format!(
                "size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}"
            ))
            .map_err(io::Error::other)?;
            let flags = MountFlags::NOSUID | MountFlags::NODEV;
            rustix::mount::mount(
                WORKSPACE_MOUNT_SOURCE,
                &staging,
                "tmpfs",
                flags,
                data.as_c_str(),
            )?;
            let halves = [(workspace, "ws"), (tmpdir, "tmp")];
            for (_, half) in halves {
                let dir = staging.join(half);
                std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
                std::os::unix::fs::chown(&dir, Some(uid), Some(uid))?;
            }
            for (point, half) in halves {
                // bind mounts keep the tmpfs's nosuid and nodev
                rustix::mount::mount_bind(staging.join(half), point)?;
                mounts.points.push(point.to_path_buf());
            }
            Ok(())
        })();
        // the staging mount is no longer needed: the binds hold the filesystem
        detach(&staging);
        let _ = std::fs::remove_dir(&staging);
        result.map(|()| mounts)
    }
}

impl Drop for QuotaMounts {
    fn drop(&mut self) {
        for point in self.points.drain(..).rev() {
            detach(&point);
        }
    }
}

/// `<dir><suffix>` beside `dir`.
fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

/// Detaches whatever is mounted at `point` (never following a link there); nothing mounted is
/// fine.
pub(super) fn detach(point: &Path) {
    match rustix::mount::unmount(point, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
        Ok(()) => {}
        Err(Errno::INVAL | Errno::NOENT) => {}
        Err(e) => tracing::warn!("could not unmount {}: {e}", point.display()),
    }
}

/// Whether this process may mount a tmpfs under `root` (root or CAP_SYS_ADMIN, and no seccomp
/// filter or read-only mount in the way): tried once at start with a tiny one.
pub(super) fn can_mount(root: &Path, probe_name: &str) -> bool {
    let probe = root.join(probe_name);
    let tried = (|| {
        std::fs::create_dir_all(root)?;
        std::fs::DirBuilder::new().mode(0o700).create(&probe)?;
        rustix::mount::mount(
            "tmpfs",
            &probe,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            c"size=4096,mode=0700",
        )?;
        rustix::mount::unmount(&probe, UnmountFlags::DETACH)?;
        Ok::<(), io::Error>(())
    })();
    let _ = std::fs::remove_dir(&probe);
    if let Err(e) = &tried {
        tracing::warn!(
            "session workspaces are plain directories without a size cap (a size-capped tmpfs \
             needs root or CAP_SYS_ADMIN): {e}"
        );
    }
    tried.is_ok()
}

/// Detaches the workspace mounts a crashed earlier run left under `root` (of sessions that are
/// gone): tmpfs mounts exactly at `<root>/<account>/<dir>`, the only ones a manager makes, so
/// nothing else mounted under a carelessly chosen root is touched. `root` belongs to one manager.
pub(super) fn detach_stale_mounts(root: &Path) {
    let (Ok(root), Ok(mountinfo)) = (
        root.canonicalize(),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return;
    };
    for line in mountinfo.lines() {
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(point), Some("tmpfs")) = (head.split(' ').nth(4), tail.split(' ').next()) else {
            continue;
        };
        let point = PathBuf::from(crate::mountinfo::unescape(point));
        let ours = point
            .strip_prefix(&root)
            .is_ok_and(|relative| relative.components().count() == 2);
        if ours {
            tracing::info!(
                "detaching a mount left by an earlier run: {}",
                point.display()
            );
            detach(&point);
        }
    }
}

/// Gives a plain (not mounted) workspace directory to the session's user.
pub(super) fn give_to(dir: &Path, uid: u32) -> Result<(), ManagerError> {
    std::os::unix::fs::chown(dir, Some(uid), Some(uid)).map_err(|source| ManagerError::Workspace {
        path: dir.to_path_buf(),
        source,
    })
}

/// Whether this process may give files to another uid (root with CAP_CHOWN): tried once at start
/// on an empty directory. Without it workspaces and uploads stay the server's.
pub(super) fn can_give_away(root: &Path, probe_name: &str, uid: u32) -> bool {
    let probe = root.join(probe_name);
    let tried = std::fs::create_dir_all(root)
        .and_then(|()| std::fs::DirBuilder::new().mode(0o700).create(&probe))
        .and_then(|()| std::os::unix::fs::chown(&probe, Some(uid), Some(uid)));
    let _ = std::fs::remove_dir(&probe);
    tried.is_ok()
}
