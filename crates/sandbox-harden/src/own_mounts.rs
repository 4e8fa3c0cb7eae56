//! The zygote's own mount namespace.
//!
//! A session's mount namespace starts as a copy of its zygote's: `unshare(CLONE_NEWNS)` copies
//! every mount, and step (b) walks them twice more (`MS_REC | MS_PRIVATE`, then the old root's
//! detach). A zygote in the host's namespace so made each new session pay for every mount of
//! the host, which holds the workspace mounts of every live session: a new session's cost grew
//! with the sessions alive (fork, `unshare` and exit took 1.0–1.3 ms more with 532 mounts on the
//! host than with 22: about 2 µs a mount; 844 mounts with 270 sessions live in the bench).
//!
//! So the zygote takes a private namespace of its own at start, keeps the host's mounts it had
//! then, less the workspace mounts already there (a zygote started again beside live sessions,
//! or beside another server's), and no mount made on the host later reaches it. Each child then
//! gets its workspace as a detached mount, a descriptor the server made with
//! `open_tree(OPEN_TREE_CLONE)` where the workspace is mounted, moved into the child's own root.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

/// Whether this process is in its own mount namespace already.
static ENTERED: AtomicBool = AtomicBool::new(false);

/// Moves the calling process, which must have one thread (only the calling thread would move),
/// into a mount namespace of its own, private (no mount event crosses from the host's or back),
/// and detaches there every mount whose source is `source` (empty: none). Once; later calls do
/// nothing. Returns how many mounts were detached.
pub fn enter_own_mount_namespace(source: &str) -> io::Result<usize> {
    if ENTERED.load(Ordering::Acquire) {
        return Ok(0);
    }
    let threads = sys::thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "a mount namespace of its own needs one thread; this process has {threads}"
        )));
    }
    sys::unshare(libc::CLONE_NEWNS)?;
    // Before anything is detached: in a namespace still peered with the host's, a detach here
    // would take the host's mount too.
    sys::make_mounts_private()?;
    let detached = if source.is_empty() {
        0
    } else {
        detach_source(source)?
    };
    // only now: a failure above leaves the caller to exit (the zygote does), never to go on
    // believing it has a private namespace
    ENTERED.store(true, Ordering::Release);
    Ok(detached)
}

/// Detaches every mount of `source` in the caller's mount namespace; how many.
fn detach_source(source: &str) -> io::Result<usize> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut points = mounts_of_source(&table, source.as_bytes());
    // the deepest first: a mount beneath another is detached before the one above takes it along
    points.sort_by_key(|point| std::cmp::Reverse(point.as_os_str().len()));
    let mut detached = 0;
    for point in points {
        match sys::detach(&point) {
            Ok(()) => detached += 1,
            // gone with a mount above it, or its directory removed: nothing left to detach
            Err(error) if matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(detached)
}

/// The mount points of `/proc/self/mountinfo`'s lines (`table`) whose filesystem source is
/// `source` (escapes undone on both fields).
fn mounts_of_source(table: &str, source: &[u8]) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = head.split(' ').nth(4)?;
            let mounted = tail.split(' ').nth(1)?;
            (unescape(mounted) == source).then(|| {
                PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(point)).to_os_string())
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space: the kernel escapes space, tab, newline
/// and backslash); the rule of sandbox-manager's `mountinfo::unescape`, which this crate, standing
/// on no workspace crate, cannot call.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)))
            .map(|digits| {
                digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'))
            });
        match octal.and_then(|value| u8::try_from(value).ok()) {
            Some(value) => {
                out.push(value);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mounts_of_the_source_are_picked_escapes_undone() {
        let table = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
66 27 0:39 /ws /var/tmp/a/ws rw,nosuid,nodev - tmpfs toolgate-workspace rw,size=1024k
67 27 0:39 /tmp /var/tmp/a\\040b/ws.tmp rw shared:4 - tmpfs toolgate-workspace rw
68 27 0:40 / /var/tmp/other rw - tmpfs tmpfs rw
69 27 0:41 / /var/tmp/look-alike rw - tmpfs toolgate-workspace-not rw
70 27 0:42 / /var/tmp/spaced rw - tmpfs toolgate\\040workspace rw
broken line without a separator";
        assert_eq!(
            mounts_of_source(table, b"toolgate-workspace"),
            [
                PathBuf::from("/var/tmp/a/ws"),
                PathBuf::from("/var/tmp/a b/ws.tmp")
            ]
        );
        assert_eq!(
            mounts_of_source(table, b"toolgate workspace"),
            [PathBuf::from("/var/tmp/spaced")]
        );
    }

    #[test]
    fn escapes_are_undone_and_partial_ones_kept() {
        assert_eq!(unescape("/mnt/a\\040b"), b"/mnt/a b");
        assert_eq!(unescape("a\\134b\\011"), b"a\\b\t");
        assert_eq!(unescape("trailing\\04"), b"trailing\\04");
        assert_eq!(unescape("\\777"), b"\\777");
    }
}
