//! Step (b): the session's mount table, made while the child is still the host's root in a mount
//! namespace owned by the host's user namespace. Once the child has its own user namespace
//! (step (d)) it holds no capability over this mount namespace, so it can neither unmount nor
//! change any of these mounts.
//!
//! - every mount private (no propagation either way);
//! - a fresh `proc` on `/proc`: it shows the session's pid namespace only;
//! - an empty tmpfs of `tmp_bytes` on `/tmp` and one of 64 MiB on `/dev/shm`, mode 0700, owned by
//!   the session's host uid;
//! - an empty read-only tmpfs on `/run` (and `/var/run` when it is a directory of its own): the
//!   host's pathname UNIX sockets there (and in `/tmp`) cannot be reached, which Landlock does not
//!   mediate before ABI 9;
//! - masks: a read-only path whose ancestors the session's uid cannot search (a runtime under
//!   `/root`, mode 0700) is bind-mounted at its own path beneath a read-only tmpfs laid over the
//!   first such ancestor, so the session reaches that path and nothing else of the ancestor; the
//!   directory holding the sessions root (the data directory by default) is masked the same way,
//!   showing the session its own workspace and nothing else there.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::HardenError;
use crate::spec::{HardenSpec, SHOWN_IN_TMP};
use crate::sys;

/// The size of the session's `/dev/shm`.
const SHM_BYTES: u64 = 64 << 20;
/// The size of a read-only mask: it holds a few empty directories.
const MASK_BYTES: u64 = 1 << 20;

/// What step (b) mounted that Landlock must grant.
pub(crate) struct SessionMounts {
    /// The session's own `/proc`: read-only.
    pub(crate) proc: PathBuf,
    /// The session's `/dev/shm`, when the host has one: read-write.
    pub(crate) shm: Option<PathBuf>,
}

/// A tmpfs laid over an ancestor the session cannot search, and the paths shown beneath it.
struct Mask {
    /// The ancestor (canonical).
    point: PathBuf,
    /// Canonical read-only paths beneath it, each with an `O_PATH` descriptor opened before the
    /// mask hid it.
    exposed: Vec<(PathBuf, File)>,
}

/// Step (b): every mount of the session, in order. The child is the host's root here.
pub(crate) fn make_session_mounts(spec: &HardenSpec) -> Result<SessionMounts, HardenError> {
    let root = Path::new("/");
    // No mount event crosses between this mount namespace and the host's, in either direction.
    sys::mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(HardenError::MountsPrivate)?;

    // Other sessions' workspaces out of this namespace, while the host's /proc still lists them.
    if let Some(root) = &spec.hide_mounts_below {
        hide_other_mounts(root, &spec.workspace)?;
    }

    // Planned (and the exposed paths opened) before anything is mounted over them.
    let masks = plan_masks(spec)?;
    let in_tmp = open_read_only_in_tmp(spec)?;

    let proc = PathBuf::from("/proc");
    mount_fs(
        "a private proc",
        "proc",
        &proc,
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    let owned = |bytes: u64| format!("size={bytes},mode=0700,uid={uid},gid={uid}", uid = spec.uid);
    mount_fs(
        "an empty tmpfs",
        "tmpfs",
        Path::new("/tmp"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&owned(spec.tmp_bytes)),
    )?;
    for (path, fd) in &in_tmp {
        bind_back(Path::new(SHOWN_IN_TMP), path, fd)?;
    }
    let shm = Path::new("/dev/shm");
    let shm = if shm.is_dir() {
        mount_fs(
            "an empty tmpfs",
            "tmpfs",
            shm,
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&owned(SHM_BYTES)),
        )?;
        Some(shm.to_path_buf())
    } else {
        None
    };
    // `/var/run` is usually a link to `/run`: each directory once.
    let mut runs: Vec<PathBuf> = Vec::new();
    for run in ["/run", "/var/run"] {
        if let Ok(run) = std::fs::canonicalize(run)
            && run.is_dir()
            && !runs.contains(&run)
        {
            runs.push(run);
        }
    }
    for run in &runs {
        mount_fs(
            "an empty read-only tmpfs",
            "tmpfs",
            run,
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=4096,mode=0755"),
        )?;
    }
    for mask in masks {
        apply_mask(mask)?;
    }
    Ok(SessionMounts { proc, shm })
}

/// Shows the hidden original of `path` (opened as `fd` before `point` was covered) at its own
/// path beneath `point`.
fn bind_back(point: &Path, path: &Path, fd: &File) -> Result<(), HardenError> {
    make_mount_point(point, path, fd)
        .map_err(mount_error("a mount point for a read-only path", path))?;
    // The descriptor's magic link names the hidden original; the session's /proc is mounted.
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    sys::mount(
        Some(&source),
        path,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .map_err(mount_error("a read-only path (bind)", path))
}

/// The read-only paths beneath `/tmp` (a checkout or runtime kept there), opened before the
/// session's own `/tmp` hides them; each outermost one once.
fn open_read_only_in_tmp(spec: &HardenSpec) -> Result<Vec<(PathBuf, File)>, HardenError> {
    let mut paths: Vec<PathBuf> = spec
        .read_only
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .filter(|path| path.starts_with(SHOWN_IN_TMP) && path != Path::new(SHOWN_IN_TMP))
        .collect();
    paths.sort();
    paths.dedup();
    let mut opened: Vec<(PathBuf, File)> = Vec::new();
    for path in paths {
        if opened.iter().any(|(shown, _)| path.starts_with(shown)) {
            continue;
        }
        let fd = open_path(&path)?;
        opened.push((path, fd));
    }
    Ok(opened)
}

/// An `O_PATH` descriptor of `path`, which keeps naming it after something is mounted over it.
fn open_path(path: &Path) -> Result<File, HardenError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| HardenError::Mount {
            what: "a read-only path (open)",
            target: path.to_path_buf(),
            source,
        })
}

/// Detaches every mount strictly beneath `root` except `workspace` (and what lies beneath it),
/// deepest first. Mounts merely covered by another would still be listed in mountinfo, so
/// each is taken out, not hidden.
fn hide_other_mounts(root: &Path, workspace: &Path) -> Result<(), HardenError> {
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(HardenError::MountsHidden)?;
    let mut others: Vec<PathBuf> = toolgate_sandbox::mountinfo::mount_points(&table)
        .filter(|point| point.starts_with(root) && point != root)
        .filter(|point| !point.starts_with(workspace) && !workspace.starts_with(point))
        .collect();
    others.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    others.dedup();
    for point in others {
        match sys::detach(&point) {
            // already gone with a mount above it
            Err(e)
                if e.raw_os_error() == Some(libc::EINVAL)
                    || e.raw_os_error() == Some(libc::ENOENT) => {}
            other => other.map_err(HardenError::MountsHidden)?,
        }
    }
    Ok(())
}

/// Mounts a new filesystem of type `fstype` on `target`.
fn mount_fs(
    what: &'static str,
    fstype: &str,
    target: &Path,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), HardenError> {
    sys::mount(Some(Path::new(fstype)), target, Some(fstype), flags, data).map_err(|source| {
        HardenError::Mount {
            what,
            target: target.to_path_buf(),
            source,
        }
    })
}

/// Lays the tmpfs, shows each exposed path at its own place beneath it, then makes it read-only.
fn apply_mask(mask: Mask) -> Result<(), HardenError> {
    mount_fs(
        "a mask (tmpfs)",
        "tmpfs",
        &mask.point,
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(&format!("size={MASK_BYTES},mode=0711")),
    )?;
    for (path, fd) in &mask.exposed {
        bind_back(&mask.point, path, fd)?;
    }
    // The bind mounts stay as they are (Landlock grants them read and execute only, and their
    // files belong to the host); the mask itself becomes read-only.
    sys::mount(
        None,
        &mask.point,
        None,
        libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC,
        None,
    )
    .map_err(mount_error("a mask (read-only remount)", &mask.point))
}

/// The error of a mount step on `target`.
fn mount_error<'a>(
    what: &'static str,
    target: &'a Path,
) -> impl FnOnce(io::Error) -> HardenError + 'a {
    move |source| HardenError::Mount {
        what,
        target: target.to_path_buf(),
        source,
    }
}

/// Creates `path` (a directory, or an empty file when `original` is one) and the directories
/// between `point` and it, each mode 0711 whatever the umask: searchable, so the path resolves,
/// but not listable, so a session learns nothing from them.
fn make_mount_point(point: &Path, path: &Path, original: &File) -> io::Result<()> {
    let is_dir = original.metadata()?.is_dir();
    let Ok(relative) = path.strip_prefix(point) else {
        return Err(io::Error::other("the path is not beneath its mask"));
    };
    let mut current = point.to_path_buf();
    let components: Vec<_> = relative.components().collect();
    for (index, component) in components.iter().enumerate() {
        current.push(component);
        let last = index + 1 == components.len();
        if current.exists() {
            continue;
        }
        if last && !is_dir {
            File::create(&current)?;
        } else {
            std::fs::create_dir(&current)?;
            std::fs::set_permissions(&current, std::fs::Permissions::from_mode(0o711))?;
        }
    }
    Ok(())
}

/// The masks the spec's read-only paths need, their paths opened (`O_PATH`) while reachable.
/// A path that does not exist is left to Landlock, which reports it.
fn plan_masks(spec: &HardenSpec) -> Result<Vec<Mask>, HardenError> {
    let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
    let read_only: Vec<PathBuf> = spec
        .read_only
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        // shown inside the session's own /tmp instead
        .filter(|path| !path.starts_with(SHOWN_IN_TMP))
        .collect();
    for path in &read_only {
        if let Some(point) = first_unsearchable_ancestor(path, spec.uid)? {
            pairs.push((point, path.clone()));
        }
    }
    if let Some(point) = around_the_sessions(spec) {
        let workspace = std::fs::canonicalize(&spec.workspace).map_err(|error| {
            HardenError::InvalidSpec(format!("workspace {}: {error}", spec.workspace.display()))
        })?;
        pairs.push((point.clone(), workspace));
        for path in read_only.iter().filter(|path| path.starts_with(&point)) {
            pairs.push((point.clone(), path.clone()));
        }
    }
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    // One mask per outermost point; a point beneath another is covered by the outer mask.
    let mut points: Vec<PathBuf> = pairs.iter().map(|(point, _)| point.clone()).collect();
    points.sort();
    points.dedup();
    let outer: Vec<PathBuf> = points
        .iter()
        .filter(|point| {
            !points
                .iter()
                .any(|other| other != *point && point.starts_with(other))
        })
        .cloned()
        .collect();
    let mut paths: Vec<PathBuf> = pairs.into_iter().map(|(_, path)| path).collect();
    paths.sort();
    paths.dedup();
    let mut masks = Vec::new();
    for point in outer {
        let mut exposed: Vec<(PathBuf, File)> = Vec::new();
        for path in paths.iter().filter(|path| path.starts_with(&point)) {
            // A path beneath one already shown comes with it.
            if exposed.iter().any(|(shown, _)| path.starts_with(shown)) {
                continue;
            }
            exposed.push((path.clone(), open_path(path)?));
        }
        masks.push(Mask { point, exposed });
    }
    Ok(masks)
}

/// The directory that holds the sessions root (the data directory by default), masked so that
/// the session sees its own workspace there and nothing else: not the names, sizes or times of
/// other sessions' workspaces (`.warm/<prefix>-N` are predictable), nor `toolgate.db` and its WAL
/// beside them (the service's call volume). `stat` needs no read permission, so Landlock, which
/// governs opening, could not hide them. `None` when the sessions root sits right under `/`.
fn around_the_sessions(spec: &HardenSpec) -> Option<PathBuf> {
    let root = std::fs::canonicalize(spec.hide_mounts_below.as_ref()?).ok()?;
    let parent = root.parent()?;
    (parent != Path::new("/")).then(|| parent.to_path_buf())
}

/// The first ancestor of `path` (from `/` down, `path` itself excluded) that `uid` (with group
/// `uid` and no other group) may not search, by its mode bits. ACLs are not read: a directory
/// that only an ACL opens gets a mask it does not need, which is harmless.
fn first_unsearchable_ancestor(path: &Path, uid: u32) -> Result<Option<PathBuf>, HardenError> {
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for ancestor in ancestors {
        let Ok(metadata) = std::fs::metadata(ancestor) else {
            return Ok(None);
        };
        if !searchable(metadata.uid(), metadata.gid(), metadata.mode(), uid) {
            if ancestor == Path::new("/") {
                return Err(HardenError::InvalidSpec(format!(
                    "/ is not searchable by uid {uid}"
                )));
            }
            return Ok(Some(ancestor.to_path_buf()));
        }
    }
    Ok(None)
}

/// Whether `uid` (group `uid`, no supplementary group) may search a directory of this owner,
/// group and mode, as the kernel's permission check reads the mode bits.
pub(crate) fn searchable(owner: u32, group: u32, mode: u32, uid: u32) -> bool {
    let bit = if owner == uid {
        0o100
    } else if group == uid {
        0o010
    } else {
        0o001
    };
    mode & bit != 0
}

/// Refuses a workspace that the session's uid could not reach: every ancestor must be
/// searchable (the server makes its directories so; this crate does not chmod the host's).
pub(crate) fn check_workspace_reachable(spec: &HardenSpec) -> Result<(), HardenError> {
    let path = std::fs::canonicalize(&spec.workspace).map_err(|error| {
        HardenError::InvalidSpec(format!("workspace {}: {error}", spec.workspace.display()))
    })?;
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for ancestor in ancestors {
        let metadata = std::fs::metadata(ancestor).map_err(|error| {
            HardenError::InvalidSpec(format!("{}: {error}", ancestor.display()))
        })?;
        if !searchable(metadata.uid(), metadata.gid(), metadata.mode(), spec.uid) {
            return Err(HardenError::InvalidSpec(format!(
                "workspace {}: its ancestor {} (mode {:o}) is not searchable by uid {}",
                spec.workspace.display(),
                ancestor.display(),
                metadata.mode() & 0o7777,
                spec.uid
            )));
        }
    }
    Ok(())
}
