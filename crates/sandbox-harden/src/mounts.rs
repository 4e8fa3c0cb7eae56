//! Step (b): the session's file tree, a minimal root of its own, made while the child is still
//! the host's root in a mount namespace owned by the host's user namespace. Once the child has
//! its own user namespace (step (d)) it holds no capability over this mount namespace, so it
//! can neither unmount nor change any of these mounts.
//!
//! The root is an empty read-only tmpfs holding only:
//! - each `read_only` path, bind-mounted read-only at its own path (the runtime must be found
//!   where the forked interpreter already looks for it), with the directories leading to it
//!   (empty, mode 0755); the host's symlinks in `/` that lead into them (`/bin` → `usr/bin`);
//! - the workspace at [`WORKSPACE_INSIDE`], the process's working directory afterwards;
//! - a fresh `proc` on `/proc`: it shows the session's pid namespace only;
//! - an empty tmpfs of `tmp_bytes` on `/tmp` and one of 64 MiB on `/dev/shm`, mode 0700, owned
//!   by the session's host uid; a `read_only` path beneath the host's `/tmp` (a checkout there)
//!   is bound back at its own place inside the session's `/tmp`;
//! - `/dev` with `null`, `zero`, `full`, `random` and `urandom` (the host's nodes, bound) and the
//!   `fd`, `stdin`, `stdout`, `stderr` links into `/proc/self/fd`.
//!
//! Then `pivot_root` into it, and the host's tree is detached: nothing else of the host can be
//! opened, listed or even `stat`ed (not other sessions' workspaces, not the data directory and its
//! database, not a host's world-writable UNIX socket, which Landlock does not mediate before ABI
//! 9), and `/proc/self/mountinfo` lists this root's mounts only.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::HardenError;
use crate::policy::DEVICES;
use crate::spec::{HardenSpec, SHOWN_IN_TMP, WORKSPACE_INSIDE};
use crate::sys;

/// The size of the session's `/dev/shm`.
const SHM_BYTES: u64 = 64 << 20;
/// The size of the root: it holds a few empty directories, files and links.
const ROOT_BYTES: u64 = 1 << 20;
/// Where the new root is assembled before `pivot_root`: a directory every host has, covered
/// only in this mount namespace (what lies beneath it was opened before).
const STAGING: &str = "/tmp";
/// Links in the session's `/dev`, as the host's udev makes them.
const DEV_LINKS: [(&str, &str); 4] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// What step (b) mounted that Landlock must grant, as paths inside the new root.
pub(crate) struct SessionMounts {
    /// The session's own `/proc`: read-only.
    pub(crate) proc: PathBuf,
    /// The session's `/dev/shm`: read-write.
    pub(crate) shm: PathBuf,
    /// The workspace, [`WORKSPACE_INSIDE`]: read-write.
    pub(crate) workspace: PathBuf,
}

/// A host path shown in the session, opened (`O_PATH`) before anything was mounted over it.
struct Shown {
    /// Its canonical host path, which is also its path inside.
    path: PathBuf,
    /// The descriptor that keeps naming it.
    fd: File,
}

/// Where the session's workspace comes from.
enum WorkspaceSource {
    /// The host's directory at `spec.workspace`, opened (`O_PATH`) and bound.
    Host(File),
    /// A detached mount of it (`open_tree(OPEN_TREE_CLONE)`), moved into place: the zygote's
    /// own mount namespace does not have the workspace mounts made after it started.
    Detached(OwnedFd),
}

/// Step (b): every mount of the session, in order, then `pivot_root`. The child is the host's
/// root here. The workspace is `detached` when given, else `spec.workspace` as this process
/// sees it.
pub(crate) fn make_session_mounts(
    spec: &HardenSpec,
    detached: Option<OwnedFd>,
) -> Result<SessionMounts, HardenError> {
    sys::make_mounts_private().map_err(HardenError::MountsPrivate)?;

    // Everything shown is opened before the staging tmpfs covers anything.
    let (in_tmp, elsewhere) = open_read_only(spec)?;
    let workspace = match detached {
        Some(fd) => WorkspaceSource::Detached(fd),
        None => std::fs::canonicalize(&spec.workspace)
            .and_then(|path| open_path(&path))
            .map(WorkspaceSource::Host)
            .map_err(mount_error("the workspace (open)", &spec.workspace))?,
    };
    let devices = open_devices()?;
    let links = root_links(&elsewhere);

    let root = Path::new(STAGING);
    mount_fs(
        "the session's root (tmpfs)",
        "tmpfs",
        root,
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("size={ROOT_BYTES},mode=0755")),
    )?;
    let inside = |path: &str| root.join(path.trim_start_matches('/'));

    let proc = inside("/proc");
    make_dir(&proc)?;
    mount_fs(
        "a private proc",
        "proc",
        &proc,
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for shown in &elsewhere {
        bind_read_only(root, shown)?;
    }
    for (link, target) in &links {
        std::os::unix::fs::symlink(target, inside(link))
            .map_err(mount_error("a link to a read-only path", Path::new(link)))?;
    }
    let owned = |bytes: u64| format!("size={bytes},mode=0700,uid={uid},gid={uid}", uid = spec.uid);
    let tmp = inside("/tmp");
    make_dir(&tmp)?;
    mount_fs(
        "an empty tmpfs",
        "tmpfs",
        &tmp,
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&owned(spec.tmp_bytes)),
    )?;
    for shown in &in_tmp {
        bind_read_only(root, shown)?;
    }
    let shm = make_dev(root, &devices, &owned(SHM_BYTES))?;
    let session_workspace = inside(WORKSPACE_INSIDE);
    make_dir(&session_workspace)?;
    match &workspace {
        WorkspaceSource::Host(dir) => bind(dir, &session_workspace)?,
        WorkspaceSource::Detached(mount) => sys::move_mount_here(mount.as_fd(), &session_workspace)
            .map_err(mount_error(
                "the workspace (a detached mount)",
                &session_workspace,
            ))?,
    }

    // Nothing is created in the root after this.
    sys::mount(
        None,
        root,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
    .map_err(mount_error("the session's root (read-only remount)", root))?;
    // The descriptors name host paths; none may survive the detach below.
    drop((in_tmp, elsewhere, workspace, devices));
    enter_root(root)?;
    Ok(SessionMounts {
        proc: PathBuf::from("/proc"),
        shm,
        workspace: PathBuf::from(WORKSPACE_INSIDE),
    })
}

/// `pivot_root` into `root`, detaches the host's tree, and enters the workspace.
fn enter_root(root: &Path) -> Result<(), HardenError> {
    let failed = |what| mount_error(what, root);
    let old_root = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open("/")
        .map_err(failed("pivot_root (open the old root)"))?;
    std::env::set_current_dir(root).map_err(failed("pivot_root (enter the new root)"))?;
    // The old root ends up stacked on the new one (pivot_root(2), "new_root and put_old may be
    // the same directory"); from inside it, `.` names the old root's mount, which is detached.
    sys::pivot_root_here().map_err(failed("pivot_root"))?;
    sys::fchdir(&old_root).map_err(failed("pivot_root (enter the old root)"))?;
    sys::detach(Path::new(".")).map_err(failed("pivot_root (detach the old root)"))?;
    drop(old_root);
    std::env::set_current_dir(WORKSPACE_INSIDE).map_err(mount_error(
        "the workspace (enter)",
        Path::new(WORKSPACE_INSIDE),
    ))
}

/// The session's `/dev`: the device nodes, the links into `/proc/self/fd`, and its own
/// `/dev/shm` (a tmpfs with `options`), whose path is returned.
fn make_dev(root: &Path, devices: &[(&str, File)], options: &str) -> Result<PathBuf, HardenError> {
    let dev = root.join("dev");
    make_dir(&dev)?;
    for (name, fd) in devices {
        let node = dev.join(name);
        File::create(&node).map_err(mount_error("a device node (mount point)", &node))?;
        bind(fd, &node)?;
    }
    for (name, target) in DEV_LINKS {
        let link = dev.join(name);
        std::os::unix::fs::symlink(target, &link).map_err(mount_error("a link in /dev", &link))?;
    }
    let shm = dev.join("shm");
    make_dir(&shm)?;
    mount_fs(
        "an empty tmpfs",
        "tmpfs",
        &shm,
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(options),
    )?;
    Ok(PathBuf::from("/dev/shm"))
}

/// The host's device nodes that Landlock grants (`policy::DEVICES`) and that exist,
/// opened, by name.
fn open_devices() -> Result<Vec<(&'static str, File)>, HardenError> {
    let mut opened = Vec::new();
    for (device, _) in DEVICES {
        let path = Path::new(device);
        let name = device.trim_start_matches("/dev/");
        if path.exists() {
            let fd = open_path(path).map_err(mount_error("a device node (open)", path))?;
            opened.push((name, fd));
        }
    }
    Ok(opened)
}

/// The spec's read-only paths, canonical, each outermost one once, opened: those beneath the
/// host's `/tmp` (shown inside the session's own `/tmp`), and the others. A path that does not
/// exist is left out (Landlock reports it).
fn open_read_only(spec: &HardenSpec) -> Result<(Vec<Shown>, Vec<Shown>), HardenError> {
    let mut paths: Vec<PathBuf> = spec
        .read_only
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect();
    paths.sort();
    paths.dedup();
    let mut outermost: Vec<PathBuf> = Vec::new();
    for path in paths {
        if !outermost.iter().any(|shown| path.starts_with(shown)) {
            outermost.push(path);
        }
    }
    let (mut in_tmp, mut elsewhere) = (Vec::new(), Vec::new());
    for path in outermost {
        let fd = open_path(&path).map_err(mount_error("a read-only path (open)", &path))?;
        let shown = Shown { path, fd };
        if shown.path.starts_with(SHOWN_IN_TMP) {
            in_tmp.push(shown);
        } else {
            elsewhere.push(shown);
        }
    }
    Ok((in_tmp, elsewhere))
}

/// The host's symlinks in `/` that lead into a shown path (`/bin` → `usr/bin` on a merged
/// `/usr`), as (path, link text): a program that names `/bin/bash` finds it.
fn root_links(shown: &[Shown]) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_symlink()))
        .filter_map(|entry| {
            let path = entry.path();
            let target = std::fs::canonicalize(&path).ok()?;
            if !shown.iter().any(|shown| target.starts_with(&shown.path)) {
                return None;
            }
            Some((path.to_str()?.to_owned(), std::fs::read_link(&path).ok()?))
        })
        .collect()
}

/// `path` (an `O_PATH` descriptor), which keeps naming it after something is mounted over it.
fn open_path(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
}

/// Shows `shown` at its own path beneath `root`, read-only, without set-ID or device files.
fn bind_read_only(root: &Path, shown: &Shown) -> Result<(), HardenError> {
    let target = root.join(shown.path.strip_prefix("/").unwrap_or(&shown.path));
    make_mount_point(root, &target, &shown.fd)
        .map_err(mount_error("a mount point for a read-only path", &target))?;
    bind(&shown.fd, &target)?;
    // The flags the host's mount has that must survive the remount (it replaces them all).
    let kept = sys::mount_flags(&target)
        .map_err(mount_error("a read-only path (read its flags)", &target))?;
    sys::mount(
        None,
        &target,
        None,
        kept | libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NODEV,
        None,
    )
    .map_err(mount_error("a read-only path (read-only remount)", &target))
}

/// Bind-mounts what `fd` names (with the mounts beneath it) on `target`.
fn bind(fd: &File, target: &Path) -> Result<(), HardenError> {
    // The descriptor's magic link names the original even where the staging root covers it.
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    sys::mount(
        Some(&source),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .map_err(mount_error("a bind mount", target))
}

/// Mounts a new filesystem of type `fstype` on `target`.
fn mount_fs(
    what: &'static str,
    fstype: &str,
    target: &Path,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), HardenError> {
    sys::mount(Some(Path::new(fstype)), target, Some(fstype), flags, data)
        .map_err(mount_error(what, target))
}

/// A directory of the root (mode 0755 whatever the umask).
fn make_dir(path: &Path) -> Result<(), HardenError> {
    std::fs::create_dir(path)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)))
        .map_err(mount_error("a directory of the root", path))
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
/// between `root` and it, each mode 0755: they hold nothing but the way to `path`.
fn make_mount_point(root: &Path, path: &Path, original: &File) -> io::Result<()> {
    let is_dir = original.metadata()?.is_dir();
    let Ok(relative) = path.strip_prefix(root) else {
        return Err(io::Error::other("the path is not beneath the root"));
    };
    let mut current = root.to_path_buf();
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
            std::fs::set_permissions(&current, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
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

/// Refuses a workspace that the session's uid could not reach on the host: the session reaches
/// it through its own root, but the server reads and writes its files as that uid.
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
