//! The zygote's side of a hardened fork: move the child into its cgroups (v2), wait until it is
//! in its own user namespace, write its id maps, release it, and wait for its final word. Any
//! failure kills the child, so it never runs a line of the session's code half-confined.
//!
//! Who moves the child into its cgroups: moving another process (a pid written to
//! `cgroup.procs`) takes the kernel's global `cgroup_threadgroup_rwsem` for writing, which waits
//! for an RCU grace period: 5 to 25 ms on a two-core VM (p50 about 12 ms per hierarchy), and the
//! zygote, which forks one child at a time, would pay it for every hierarchy of every session.
//! A single-threaded process that moves itself by writing `0` to a v1 group's `tasks` file does
//! not take that lock (p50 0.4 ms, measured beside it). So on cgroup v1 (the group has a `tasks`
//! file) the child joins its groups itself, first thing in its checklist (step (0), still the
//! host's root, before it runs anything else and after it has made sure it has one thread),
//! and the zygote writes nothing; on v2, which has no such file and refuses a thread-level move
//! across domains, the zygote writes the pid right after the fork, so that the wait overlaps
//! the child's own steps (0) to (c). Nothing of the session runs before the move either way.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::channel::{DONE, FAILED, ParentChannel, RELEASE, UNSHARED};
use crate::error::{HardenError, ReleaseError};
use crate::spec::{HardenSpec, SESSION_ID_INSIDE};
use crate::sys;

/// How long the child may take for each half of its checklist (it runs no foreign code yet, so
/// this only bounds a stuck kernel or machine).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a release stands after one message of the child.
#[derive(Debug, PartialEq, Eq)]
pub enum ReleaseProgress {
    /// The id maps are written and the child released: its last word is still to come.
    Released,
    /// The checklist is complete; the child's report line.
    Done(String),
}

/// Releases the session child `pid` (as this process sees it) that was forked with `channel`'s
/// other ends: adds it to each of the spec's cgroups, waits for it to enter its user namespace,
/// writes `setgroups` (`deny`), `uid_map` and `gid_map` (`1000 <uid> 1`), releases it, and waits
/// until its checklist is complete. Returns the child's report line. ([`begin_release`] and
/// [`advance_release`] are the same steps for a caller that waits for the child's messages in
/// its own event loop, as the zygote does.)
///
/// On error the child has been sent SIGKILL (it is pid 1 of its pid namespace: whatever it
/// started dies with it); the caller still reaps it.
pub fn release_session(
    pid: i32,
    spec: &HardenSpec,
    mut channel: ParentChannel,
) -> Result<String, ReleaseError> {
    let outcome = release_child(pid, spec, &mut channel);
    if outcome.is_err() {
        // Before the pipes close: the child must not see end of file and run its own error path
        // first.
        kill_unreaped(pid);
    }
    drop(channel);
    outcome
}

fn release_child(
    pid: i32,
    spec: &HardenSpec,
    channel: &mut ParentChannel,
) -> Result<String, ReleaseError> {
    begin_release(pid, spec)?;
    let mut released = false;
    loop {
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        let phase = waiting_for(released);
        let message = match channel.receive(deadline).map_err(ReleaseError::Channel)? {
            None => {
                return Err(ReleaseError::TimedOut {
                    seconds: RELEASE_TIMEOUT.as_secs(),
                    phase,
                });
            }
            Some(message) => message,
        };
        match advance_release(pid, spec, released, &message, channel.release_end())? {
            ReleaseProgress::Released => released = true,
            ReleaseProgress::Done(report) => return Ok(report),
        }
    }
}

/// The first step of a release, right after the fork: checks `pid` and the spec, and adds the
/// child to each of the spec's cgroups that it does not join itself (v2; see the module docs),
/// so that the kernel's wait overlaps the child's own first steps. On error the caller kills
/// the child ([`release_session`] and the C ABI do).
pub fn begin_release(pid: i32, spec: &HardenSpec) -> Result<(), ReleaseError> {
    if pid <= 0 {
        return Err(ReleaseError::InvalidPid(pid));
    }
    spec.validate().map_err(|error| match error {
        HardenError::InvalidSpec(reason) => ReleaseError::InvalidSpec(reason),
        other => ReleaseError::InvalidSpec(other.to_string()),
    })?;
    let pid_text = pid.to_string();
    for cgroup in spec.cgroups.iter().filter(|dir| !joined_by_the_child(dir)) {
        let file = cgroup.join("cgroup.procs");
        write_once(&file, &pid_text).map_err(|source| ReleaseError::Cgroup { file, source })?;
    }
    Ok(())
}

/// One message of the child (`message`, as read from the status pipe in one read; empty at end
/// of file) taken in: `U` before the release (`released` false) writes the id maps and releases
/// the child through `release` (the release pipe's write end); `D` after it completes the
/// release. Anything else, the child's own error included, is an error, after which the caller
/// kills the child ([`release_session`] and the C ABI do).
pub fn advance_release(
    pid: i32,
    spec: &HardenSpec,
    released: bool,
    message: &[u8],
    release: BorrowedFd<'_>,
) -> Result<ReleaseProgress, ReleaseError> {
    if pid <= 0 {
        return Err(ReleaseError::InvalidPid(pid));
    }
    let phase = waiting_for(released);
    match (released, message.split_first()) {
        (_, None) => Err(ReleaseError::ChildGone(phase)),
        (false, Some((&UNSHARED, []))) => {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let map = format!("{SESSION_ID_INSIDE} {} 1\n", spec.uid);
            // setgroups first: the kernel refuses `deny` once gid_map is written.
            for (name, content) in [("setgroups", "deny"), ("uid_map", &map), ("gid_map", &map)] {
                let file = proc_dir.join(name);
                write_once(&file, content)
                    .map_err(|source| ReleaseError::IdMap { file, source })?;
            }
            sys::write_all(release, &[RELEASE])
                .map_err(|_| ReleaseError::ChildGone("waiting for its id maps"))?;
            Ok(ReleaseProgress::Released)
        }
        (true, Some((&DONE, report))) => Ok(ReleaseProgress::Done(
            String::from_utf8_lossy(report).into_owned(),
        )),
        (_, Some((&FAILED, error))) => Err(ReleaseError::ChildFailed(
            String::from_utf8_lossy(error).into_owned(),
        )),
        _ => Err(ReleaseError::Protocol(
            String::from_utf8_lossy(message).into_owned(),
        )),
    }
}

/// What the zygote waits for from the child, before or after its release (for errors).
fn waiting_for(released: bool) -> &'static str {
    if released {
        "completing its checklist"
    } else {
        "entering its user namespace"
    }
}

/// SIGKILL to a child being released, which its caller has not reaped (so the pid is still its:
/// ESRCH only means it already ended); never to a pid <= 0, which would address a group.
pub(crate) fn kill_unreaped(pid: i32) {
    if pid > 0 {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
}

/// Whether the child moves itself into `cgroup` (a v1 group: it has a `tasks` file).
pub(crate) fn joined_by_the_child(cgroup: &Path) -> bool {
    cgroup.join("tasks").exists()
}

/// In the child: moves the calling thread (the whole process: it has one thread) into each of
/// `cgroups` that is a v1 group, by writing `0` to its `tasks` file (see the module docs).
pub(crate) fn join_own_cgroups(cgroups: &[PathBuf]) -> Result<(), HardenError> {
    for cgroup in cgroups.iter().filter(|dir| joined_by_the_child(dir)) {
        let file = cgroup.join("tasks");
        write_once(&file, "0").map_err(|source| HardenError::JoinCgroup { file, source })?;
    }
    Ok(())
}

/// Writes `content` with one `write`, as the kernel wants id maps (and as cgroup files take a
/// pid), without creating or truncating the file.
fn write_once(path: &Path, content: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    let written = file.write(content.as_bytes())?;
    if written == content.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "short write: {written} of {} bytes",
            content.len()
        )))
    }
}
