//! The two pipes between the zygote and the session child it forked, made before the fork:
//!
//! - status (child → zygote): `U` once the child is in its own user namespace and waits; then
//!   `D` + the report line when the checklist is complete, or `E` + the error at any point.
//!   Each message is one `write` of at most [`MAX_MESSAGE`] bytes (atomic on a pipe), so the
//!   zygote reads one message per read and never depends on end of file.
//! - release (zygote → child): `G` once the id maps and cgroups are written. End of file instead
//!   means the zygote gave up (or died): the child stops.
//!
//! The zygote keeps its release end open until the final message, so the child can tell a dead
//! zygote (end of file on its release end) from a living one after its parent-death signal was
//! cleared by the change of ids.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use crate::sys;

/// The child is in its user namespace and waits for its id maps.
pub(crate) const UNSHARED: u8 = b'U';
/// The zygote wrote the maps and cgroups: go on.
pub(crate) const RELEASE: u8 = b'G';
/// The checklist is complete; the report line follows.
pub(crate) const DONE: u8 = b'D';
/// The checklist failed; the error follows.
pub(crate) const FAILED: u8 = b'E';
/// `PIPE_BUF`: a write of at most this many bytes reaches the reader whole.
pub(crate) const MAX_MESSAGE: usize = 4096;

/// The zygote's ends of the two pipes.
#[derive(Debug)]
pub struct ParentChannel {
    status: File,
    release: File,
}

/// The session child's ends of the two pipes.
#[derive(Debug)]
pub struct ChildChannel {
    status: File,
    release: File,
}

/// Makes both pipes (close-on-exec) and returns (the zygote's ends, the child's ends); after the
/// fork each side drops the other's.
pub fn session_channel() -> io::Result<(ParentChannel, ChildChannel)> {
    let (status_read, status_write) = sys::pipe()?;
    let (release_read, release_write) = sys::pipe()?;
    Ok((
        ParentChannel::from_fds(status_read, release_write),
        ChildChannel::from_fds(status_write, release_read),
    ))
}

impl ParentChannel {
    /// The zygote's ends: the status pipe's read end and the release pipe's write end.
    pub fn from_fds(status_read: OwnedFd, release_write: OwnedFd) -> Self {
        Self {
            status: File::from(status_read),
            release: File::from(release_write),
        }
    }

    /// One message from the child: `Ok(None)` when `deadline` passed, an empty vector when the
    /// child closed its end.
    pub(crate) fn receive(&mut self, deadline: Instant) -> io::Result<Option<Vec<u8>>> {
        let left = deadline.saturating_duration_since(Instant::now());
        let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        if sys::poll_one(self.status.as_fd(), libc::POLLIN, millis)? == 0 {
            return Ok(None);
        }
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let read = loop {
            match self.status.read(&mut buffer) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        buffer.truncate(read);
        Ok(Some(buffer))
    }

    /// The release pipe's write end, through which the child is let go on.
    pub(crate) fn release_end(&self) -> BorrowedFd<'_> {
        self.release.as_fd()
    }
}

impl ChildChannel {
    /// The child's ends: the status pipe's write end and the release pipe's read end.
    pub fn from_fds(status_write: OwnedFd, release_read: OwnedFd) -> Self {
        Self {
            status: File::from(status_write),
            release: File::from(release_read),
        }
    }

    /// The two descriptors back (tests hand them to the C ABI).
    #[cfg(test)]
    pub(crate) fn into_fds(self) -> (OwnedFd, OwnedFd) {
        (self.status.into(), self.release.into())
    }

    /// Tells the zygote that the child is in its user namespace.
    pub(crate) fn unshared(&mut self) -> io::Result<()> {
        self.status.write_all(&[UNSHARED])
    }

    /// Blocks until the zygote releases the child; an error when it gave up or died instead.
    pub(crate) fn wait_release(&mut self) -> Result<(), String> {
        let mut byte = [0u8; 1];
        loop {
            match self.release.read(&mut byte) {
                Ok(0) => return Err("the zygote closed the release pipe".to_owned()),
                Ok(_) if byte[0] == RELEASE => return Ok(()),
                Ok(_) => return Err(format!("unexpected byte {:#04x}", byte[0])),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(format!("reading the release pipe: {error}")),
            }
        }
    }

    /// Whether the zygote still holds its end of the release pipe (it does until the child's
    /// final message, unless it died).
    pub(crate) fn zygote_alive(&self) -> io::Result<bool> {
        let events = sys::poll_one(self.release.as_fd(), libc::POLLIN, 0)?;
        Ok(events & (libc::POLLHUP | libc::POLLERR) == 0)
    }

    /// Sends the final message (`D` + report or `E` + error) and closes both ends.
    pub(crate) fn finish(mut self, outcome: Result<&str, &str>) {
        let (kind, text) = match outcome {
            Ok(report) => (DONE, report),
            Err(error) => (FAILED, error),
        };
        let mut message = Vec::with_capacity(MAX_MESSAGE);
        message.push(kind);
        message.extend_from_slice(fitting(text, MAX_MESSAGE - 1).as_bytes());
        // Best effort: if the zygote is gone, nobody is left to tell.
        let _ = self.status.write_all(&message);
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn fitting(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
