//! A session's image: its workspace (regular files with their modes, directories, symbolic
//! links) as one tar archive, the Python state file among the files. What the checkpoint store
//! seals and keeps; read back into a new session's empty workspace.
//!
//! The workspace belongs to hostile code, which may still run while a periodic checkpoint reads
//! it: every entry is opened relative to its directory's descriptor with `O_NOFOLLOW` (a link is
//! archived as a link, never followed), the walk is a loop over a stack (no recursion, however
//! deep the tree), and the entries, their bytes and their paths are bounded. Unpacking refuses
//! any path that climbs out or passes through a link, and drops set-uid, set-gid and sticky bits.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::files::write_content;

/// The most entries an image holds.
pub(crate) const MAX_ENTRIES: usize = 200_000;

/// The longest path inside an image, in bytes.
const MAX_PATH_BYTES: usize = 4096;

/// The name of the image's description, before the workspace's entries.
const META: &str = "toolgate-image.json";

/// Where the workspace's entries sit in the archive.
const WORKSPACE: &str = "w";

/// Why an image could not be made or read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageError {
    #[error("the workspace has more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("the workspace holds more than {max} bytes")]
    TooLarge { max: u64 },
    #[error("the image is damaged: {0}")]
    Damaged(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<Errno> for ImageError {
    fn from(errno: Errno) -> Self {
        Self::Io(errno.into())
    }
}

/// What an image says of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ImageMeta {
    /// The format's version.
    pub(crate) format: u32,
    /// Why the session's Python state is not in it, if it is not.
    pub(crate) state_error: Option<String>,
    /// The names of the environment variables (the vault's secrets) its runs were given.
    #[serde(default)]
    pub(crate) env_names: Vec<String>,
}

/// Archives `workspace` (at most `max_bytes` of file content) with `meta`. Blocking.
pub(crate) fn pack(
    workspace: &Path,
    meta: &ImageMeta,
    max_bytes: u64,
) -> Result<Vec<u8>, ImageError> {
    let root = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut tar = tar::Builder::new(Vec::new());
    let meta = serde_json::to_vec(meta).map_err(|e| ImageError::Damaged(e.to_string()))?;
    let mut header = entry_header(tar::EntryType::Regular, 0o600, meta.len() as u64);
    tar.append_data(&mut header, META, meta.as_slice())?;
    let mut entries = 0usize;
    let mut bytes = 0u64;
    let mut stack: Vec<(Vec<u8>, OwnedFd)> = vec![(WORKSPACE.as_bytes().to_vec(), root)];
    while let Some((dir_path, dir)) = stack.pop() {
        let mut listing = rustix::fs::Dir::read_from(&dir)?;
        while let Some(entry) = listing.read() {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(ImageError::TooManyEntries);
            }
            let mut path = dir_path.clone();
            path.push(b'/');
            path.extend_from_slice(name.to_bytes());
            if path.len() > MAX_PATH_BYTES {
                continue; // a path no tar reader would take back: left out
            }
            let stat = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => continue, // removed meanwhile by the session
                Err(e) => return Err(e.into()),
            };
            let mode = stat.st_mode & 0o777;
            let path_os = OsStr::from_bytes(&path);
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => {
                    let Some(child) = open_below(&dir, name, OFlags::DIRECTORY)? else {
                        continue;
                    };
                    let mut header = entry_header(tar::EntryType::Directory, mode, 0);
                    tar.append_data(&mut header, path_os, std::io::empty())?;
                    stack.push((path, child));
                }
                FileType::RegularFile => {
                    let Some(file) = open_below(&dir, name, OFlags::empty())? else {
                        continue;
                    };
                    let left = max_bytes.saturating_sub(bytes);
                    let mut content = Vec::new();
                    File::from(file)
                        .take(left.saturating_add(1))
                        .read_to_end(&mut content)?;
                    bytes += content.len() as u64;
                    if bytes > max_bytes {
                        return Err(ImageError::TooLarge { max: max_bytes });
                    }
                    let mut header =
                        entry_header(tar::EntryType::Regular, mode, content.len() as u64);
                    tar.append_data(&mut header, path_os, content.as_slice())?;
                }
                FileType::Symlink => {
                    let target = match rustix::fs::readlinkat(&dir, name, Vec::new()) {
                        Ok(target) => target,
                        Err(Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let target = OsStr::from_bytes(target.as_bytes());
                    let mut header = entry_header(tar::EntryType::Symlink, 0o777, 0);
                    tar.append_link(&mut header, path_os, target)?;
                }
                // FIFOs, sockets, devices: nothing to keep
                _ => {}
            }
        }
    }
    Ok(tar.into_inner()?)
}

/// Opens `name` in `dir` without following a link (`None` when it went meanwhile).
fn open_below(dir: &OwnedFd, name: &CStr, kind: OFlags) -> Result<Option<OwnedFd>, ImageError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | kind;
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        // removed, or replaced by a link or a FIFO meanwhile: left out
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::NXIO) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn entry_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Writes an image's workspace into `workspace` (empty), each entry owned by `owner`, file
/// content written from the memory group `charge` (as uploads are); returns the image's
/// description. Blocking.
pub(crate) fn unpack(
    image: &[u8],
    workspace: &Path,
    owner: Option<u32>,
    charge: Option<&Path>,
) -> Result<ImageMeta, ImageError> {
    let root = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut archive = tar::Archive::new(image);
    let mut meta = None;
    let mut count = 0usize;
    for entry in archive.entries()? {
        let mut entry = entry?;
        count += 1;
        if count > MAX_ENTRIES + 1 {
            return Err(ImageError::TooManyEntries);
        }
        let path = entry.path_bytes().into_owned();
        if path == META.as_bytes() {
            let mut text = Vec::new();
            (&mut entry).take(64 << 10).read_to_end(&mut text)?;
            meta = Some(
                serde_json::from_slice(&text).map_err(|e| ImageError::Damaged(e.to_string()))?,
            );
            continue;
        }
        let path = path.strip_suffix(b"/").unwrap_or(&path);
        let Some(relative) = path.strip_prefix(format!("{WORKSPACE}/").as_bytes()) else {
            return Err(ImageError::Damaged(
                "an entry outside the workspace".to_owned(),
            ));
        };
        let (parent, name) = split(relative)?;
        let at = match parent {
            None => root.try_clone()?,
            Some(parent) => rustix::fs::openat2(
                &root,
                OsStr::from_bytes(parent),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            )?,
        };
        let name = OsStr::from_bytes(name);
        let mode = Mode::from_raw_mode(entry.header().mode().unwrap_or(0o600) & 0o777);
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o700))?;
                let dir = rustix::fs::openat2(
                    &at,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    RESOLVE,
                )?;
                give(&dir, owner)?;
                rustix::fs::fchmod(&dir, mode)?;
            }
            tar::EntryType::Regular => {
                let fd = rustix::fs::openat2(
                    &at,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                    RESOLVE,
                )?;
                give(&fd, owner)?;
                rustix::fs::fchmod(&fd, mode)?;
                let mut content = Vec::new();
                entry.read_to_end(&mut content)?;
                write_content(fd, &content, charge)?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ImageError::Damaged("a link without a target".to_owned()))?;
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &at, name)?;
                if let Some(uid) = owner {
                    let id = Some(rustix::fs::Uid::from_raw(uid));
                    let gid = Some(rustix::fs::Gid::from_raw(uid));
                    rustix::fs::chownat(&at, name, id, gid, AtFlags::SYMLINK_NOFOLLOW)?;
                }
            }
            _ => {
                return Err(ImageError::Damaged(
                    "an entry of an unknown kind".to_owned(),
                ));
            }
        }
    }
    meta.ok_or_else(|| ImageError::Damaged("no description".to_owned()))
}

/// A relative path's parent (if any) and last component, every component a plain name.
fn split(path: &[u8]) -> Result<(Option<&[u8]>, &[u8]), ImageError> {
    let plain =
        |part: &[u8]| !part.is_empty() && part != b"." && part != b".." && !part.contains(&0);
    if path.len() > MAX_PATH_BYTES || !path.split(|b| *b == b'/').all(plain) {
        return Err(ImageError::Damaged("a path that is not plain".to_owned()));
    }
    Ok(match path.iter().rposition(|b| *b == b'/') {
        Some(cut) => (Some(&path[..cut]), &path[cut + 1..]),
        None => (None, path),
    })
}

fn give(fd: &OwnedFd, owner: Option<u32>) -> Result<(), Errno> {
    match owner {
        Some(uid) => rustix::fs::fchown(
            fd.as_fd(),
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(uid)),
        ),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
