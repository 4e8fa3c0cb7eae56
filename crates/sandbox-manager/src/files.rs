//! Files into and out of a session's workspace, on behalf of the caller.
//!
//! The workspace belongs to hostile code: anything in it may be a symbolic link (to `/etc`, to
//! another session), a FIFO that blocks an open, or a directory where a file is expected. So
//! every path is resolved with `openat2` from a descriptor of the workspace directory with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, one directory at a time, and
//! nothing is ever opened through a link. Uploads are written to a fresh name and renamed over
//! the target, so a link or FIFO planted at the target is replaced, never followed or opened. A
//! read looks at the file (an `O_PATH` descriptor and `fstat`) before opening it, so a FIFO or
//! device is refused without being opened. A directory is refused too (no listings: `bash ls`
//! does that).
//!
//! Errors name the caller's path and the reason, never a host path.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use toolgate_sandbox::{MAX_WORKSPACE_PATH_BYTES, PathProblem, WorkspaceFile, WorkspaceRead};

use crate::session_error::human_bytes;

/// A workspace file that could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workspace file {path:?}: {problem}")]
pub struct FileError {
    /// The path as the caller gave it.
    pub path: String,
    /// What is wrong.
    pub problem: FileProblem,
}

/// What is wrong with a workspace file or its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileProblem {
    /// empty, or only `.` and `/`
    #[error("the path names no file")]
    Empty,
    /// starts with `/`
    #[error("the path must be relative to the workspace")]
    Absolute,
    /// has a `..` component
    #[error("the path must not contain '..'")]
    ParentDir,
    /// has a NUL byte
    #[error("the path contains a NUL byte")]
    Nul,
    /// longer than [`MAX_WORKSPACE_PATH_BYTES`]
    #[error("the path is longer than {MAX_WORKSPACE_PATH_BYTES} bytes")]
    TooLong,
    /// not in the workspace
    #[error("no such file in the workspace")]
    NotFound,
    /// a symbolic link on the way or at the end
    #[error("a symbolic link is in the way (links are not followed)")]
    Symlink,
    /// a part of the path is a file, not a directory
    #[error("a part of the path is not a directory")]
    NotDirectory,
    /// a directory where a file is wanted
    #[error("it is a directory")]
    IsDirectory,
    /// a FIFO, socket or device
    #[error("it is a {0}, not a regular file")]
    NotRegular(&'static str),
    /// larger than the caller's limit
    #[error("the file has {} bytes, more than the {} that may be read", .size, human_bytes(*.max))]
    TooLarge {
        /// its size (at least)
        size: u64,
        /// the limit
        max: u64,
    },
    /// the workspace's quota is used up
    #[error("the workspace is full (its size limit is reached)")]
    NoSpace,
    /// it changed while it was being read
    #[error("it was replaced while being read")]
    Changed,
    /// anything else the kernel said
    #[error("{0}")]
    Os(Errno),
}

impl FileProblem {
    fn from_errno(errno: Errno) -> Self {
        match errno {
            Errno::NOENT => Self::NotFound,
            // RESOLVE_NO_SYMLINKS and O_NOFOLLOW answer ELOOP; RESOLVE_BENEATH answers EXDEV
            Errno::LOOP | Errno::XDEV => Self::Symlink,
            Errno::NOTDIR => Self::NotDirectory,
            Errno::ISDIR | Errno::NOTEMPTY => Self::IsDirectory,
            Errno::NOSPC | Errno::DQUOT => Self::NoSpace,
            // a FIFO opened for writing with no reader
            Errno::NXIO => Self::NotRegular("FIFO"),
            other => Self::Os(other),
        }
    }
}

/// The components of a caller's relative path (`.` and empty ones dropped), or why it is refused.
pub(super) fn components(path: &str) -> Result<Vec<&str>, FileProblem> {
    toolgate_sandbox::workspace_path_parts(path).map_err(|problem| match problem {
        PathProblem::Empty => FileProblem::Empty,
        PathProblem::Absolute => FileProblem::Absolute,
        PathProblem::ParentDir => FileProblem::ParentDir,
        PathProblem::Nul => FileProblem::Nul,
        PathProblem::TooLong => FileProblem::TooLong,
    })
}

/// Checks every path of an upload before anything is written.
pub(super) fn check_paths(files: &[WorkspaceFile]) -> Result<(), FileError> {
    for file in files {
        components(&file.path).map_err(|problem| FileError {
            path: file.path.clone(),
            problem,
        })?;
    }
    Ok(())
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens the workspace directory itself (never through a link).
fn open_workspace(workspace: &Path) -> Result<OwnedFd, FileProblem> {
    rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(FileProblem::from_errno)
}

/// The program that copies an upload's bytes from inside the session's memory group.
const COPIER: &str = "/bin/cat";

/// Writes `content` to `fd`: from a `cat` that joined the memory group `charge` (the pages are
/// charged to whoever allocates them, by process), else from this process.
pub(super) fn write_content(
    fd: OwnedFd,
    content: &[u8],
    charge: Option<&Path>,
) -> std::io::Result<()> {
    let Some(group) = charge.filter(|_| !content.is_empty()) else {
        return File::from(fd).write_all(content);
    };
    let mut copier = std::process::Command::new(COPIER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::from(fd.try_clone()?))
        .stderr(std::process::Stdio::null())
        .env_clear()
        .spawn()?;
    // it blocks on its empty stdin until it has joined: every page it writes is the session's
    let joined = std::fs::write(group.join("cgroup.procs"), copier.id().to_string());
    let fed = match (&joined, copier.stdin.take()) {
        (Ok(()), Some(mut stdin)) => stdin.write_all(content),
        _ => Ok(()),
    };
    let status = copier.wait()?;
    joined?;
    fed?;
    if !status.success() {
        return Err(std::io::Error::other(format!("{COPIER} failed: {status}")));
    }
    Ok(())
}

/// Names for upload files before they are renamed into place.
static NEXT_UPLOAD: AtomicU64 = AtomicU64::new(0);

/// Writes the files into the workspace, in order, each 0600 and (with `owner`) owned by the
/// session's user, as are the directories made for them. With `charge` (the session's memory
/// group) the bytes are written by a short-lived process in that group, so the tmpfs pages are
/// the session's memory, not the server's. Blocking. Stops at the first failure (the files
/// before it stay written).
pub(super) fn write_files(
    workspace: &Path,
    files: &[WorkspaceFile],
    owner: Option<u32>,
    charge: Option<&Path>,
) -> Result<(), FileError> {
    let root = open_workspace(workspace).map_err(|problem| FileError {
        path: String::new(),
        problem,
    })?;
    for file in files {
        write_one(&root, file, owner, charge).map_err(|problem| FileError {
            path: file.path.clone(),
            problem,
        })?;
    }
    Ok(())
}

fn write_one(
    root: &OwnedFd,
    file: &WorkspaceFile,
    owner: Option<u32>,
    charge: Option<&Path>,
) -> Result<(), FileProblem> {
    let parts = components(&file.path)?;
    let Some((name, dirs)) = parts.split_last() else {
        return Err(FileProblem::Empty);
    };
    let chown = |fd: BorrowedFd<'_>| match owner {
        Some(uid) => rustix::fs::fchown(
            fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(uid)),
        ),
        None => Ok(()),
    };
    let mut parent: Option<OwnedFd> = None;
    for dir in dirs {
        let at = parent.as_ref().unwrap_or(root).as_fd();
        let created = match rustix::fs::mkdirat(at, *dir, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false, // maybe a link: the open below refuses that
            Err(e) => return Err(FileProblem::from_errno(e)),
        };
        let fd = rustix::fs::openat2(
            at,
            *dir,
            // no O_NOFOLLOW: with O_DIRECTORY it turns a link into ENOTDIR; RESOLVE_NO_SYMLINKS
            // refuses it as a link
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(FileProblem::from_errno)?;
        if created {
            chown(fd.as_fd()).map_err(FileProblem::from_errno)?;
        }
        parent = Some(fd);
    }
    let at = parent.as_ref().unwrap_or(root).as_fd();
    // a fresh name (O_EXCL: never an existing file or link), then renamed over the target
    let (temp, fd) = loop {
        let n = NEXT_UPLOAD.fetch_add(1, Ordering::Relaxed);
        let temp = format!(".toolgate-upload.{}.{n}", std::process::id());
        match rustix::fs::openat2(
            at,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            RESOLVE,
        ) {
            Ok(fd) => break (temp, fd),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(FileProblem::from_errno(e)),
        }
    };
    let written = (|| {
        chown(fd.as_fd())?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        write_content(fd, &file.content, charge)
            .map_err(|e| e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error))?;
        rustix::fs::renameat(at, temp.as_str(), at, *name)
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(at, temp.as_str(), AtFlags::empty());
        return Err(FileProblem::from_errno(e));
    }
    Ok(())
}

/// Reads one regular file of at most `max_bytes` from the workspace. Blocking.
pub(super) fn read_file(
    workspace: &Path,
    path: &str,
    max_bytes: u64,
) -> Result<WorkspaceRead, FileError> {
    read_one(workspace, path, max_bytes).map_err(|problem| FileError {
        path: path.to_owned(),
        problem,
    })
}

fn read_one(workspace: &Path, path: &str, max_bytes: u64) -> Result<WorkspaceRead, FileProblem> {
    let relative = components(path)?.join("/");
    let root = open_workspace(workspace)?;
    // look before opening: an O_PATH descriptor opens nothing (no FIFO wait, no device side
    // effect); with O_NOFOLLOW a link at the end is returned as itself, and refused below
    let probe = rustix::fs::openat2(
        &root,
        relative.as_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(FileProblem::from_errno)?;
    let seen = rustix::fs::fstat(&probe).map_err(FileProblem::from_errno)?;
    regular(&seen)?;
    let size = u64::try_from(seen.st_size).unwrap_or(0);
    if size > max_bytes {
        return Err(FileProblem::TooLarge {
            size,
            max: max_bytes,
        });
    }
    let fd = rustix::fs::openat2(
        &root,
        relative.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(FileProblem::from_errno)?;
    let opened = rustix::fs::fstat(&fd).map_err(FileProblem::from_errno)?;
    // the session may swap the file between the look and the open
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) {
        return Err(FileProblem::Changed);
    }
    regular(&opened)?;
    // sized once (a buffer grown by doubling holds up to twice the file while it is read), with
    // room for the file's base64, which the reader may then make in place rather than beside it
    let expected = usize::try_from(size).unwrap_or(0).saturating_add(1);
    let mut bytes = Vec::with_capacity(expected.div_ceil(3) * 4);
    File::from(fd)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| {
            FileProblem::from_errno(e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error))
        })?;
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > max_bytes {
        // it grew after the look
        return Err(FileProblem::TooLarge {
            size,
            max: max_bytes,
        });
    }
    Ok(WorkspaceRead { bytes, size })
}

/// Refuses anything but a regular file, naming what it is.
fn regular(stat: &rustix::fs::Stat) -> Result<(), FileProblem> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(FileProblem::IsDirectory),
        FileType::Symlink => Err(FileProblem::Symlink),
        FileType::Fifo => Err(FileProblem::NotRegular("FIFO")),
        FileType::Socket => Err(FileProblem::NotRegular("socket")),
        FileType::CharacterDevice | FileType::BlockDevice => Err(FileProblem::NotRegular("device")),
        FileType::Unknown => Err(FileProblem::NotRegular("special file")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_are_relative_and_stay_inside() {
        assert_eq!(components("a/./b//c.txt").unwrap(), ["a", "b", "c.txt"]);
        assert_eq!(components("/etc/passwd"), Err(FileProblem::Absolute));
        assert_eq!(components("a/../../b"), Err(FileProblem::ParentDir));
        assert_eq!(components(".."), Err(FileProblem::ParentDir));
        assert_eq!(components("a\0b"), Err(FileProblem::Nul));
        assert_eq!(components("./"), Err(FileProblem::Empty));
        assert_eq!(components(""), Err(FileProblem::Empty));
        assert_eq!(components(&"a".repeat(4097)), Err(FileProblem::TooLong));
        assert!(components(&"a/".repeat(2048)).is_ok());
    }

    fn file(path: &str, content: &[u8]) -> WorkspaceFile {
        WorkspaceFile {
            path: path.to_owned(),
            content: content.to_vec(),
        }
    }

    #[test]
    fn writes_replace_links_and_never_follow_them() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let target = outside.path().join("secret");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, ws.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("dir")).unwrap();
        // a link at the target is replaced by the file
        write_files(ws.path(), &[file("link", b"new")], None, None).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(std::fs::read(ws.path().join("link")).unwrap(), b"new");
        // a link on the way is refused
        let refused = write_files(ws.path(), &[file("dir/x", b"no")], None, None).unwrap_err();
        assert_eq!(refused.problem, FileProblem::Symlink);
        assert!(!outside.path().join("x").exists());
        assert_eq!(
            refused.to_string(),
            "workspace file \"dir/x\": a symbolic link is in the way (links are not followed)"
        );
        // directories are made, files are 0600
        write_files(ws.path(), &[file("a/b/c.txt", b"deep")], None, None).unwrap();
        let meta = std::fs::metadata(ws.path().join("a/b/c.txt")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        let into_dir = write_files(ws.path(), &[file("a", b"x")], None, None).unwrap_err();
        assert_eq!(into_dir.problem, FileProblem::IsDirectory);
        // no temporary file is left behind
        let names: Vec<_> = std::fs::read_dir(ws.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn reads_refuse_links_dirs_and_big_files() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "no").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("x")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), ws.path().join("s")).unwrap();
        std::fs::write(ws.path().join("ok.txt"), "hello").unwrap();
        std::fs::create_dir(ws.path().join("d")).unwrap();
        let read = |path: &str, max| read_file(ws.path(), path, max).map_err(|e| e.problem);
        assert_eq!(
            read("ok.txt", 10),
            Ok(WorkspaceRead {
                bytes: b"hello".to_vec(),
                size: 5
            })
        );
        assert_eq!(read("x/secret", 10), Err(FileProblem::Symlink));
        assert_eq!(read("s", 10), Err(FileProblem::Symlink));
        assert_eq!(read("d", 10), Err(FileProblem::IsDirectory));
        assert_eq!(read("nope", 10), Err(FileProblem::NotFound));
        assert_eq!(read("ok.txt/x", 10), Err(FileProblem::NotDirectory));
        assert_eq!(
            read("ok.txt", 4),
            Err(FileProblem::TooLarge { size: 5, max: 4 })
        );
    }
}
