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
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::channel::{DONE, FAILED, ParentChannel, UNSHARED};
use crate::error::{HardenError, ReleaseError};
use crate::spec::{HardenSpec, SESSION_ID_INSIDE};
use crate::sys;

/// How long the child may take for each half of its checklist (it runs no foreign code yet, so
/// this only bounds a stuck kernel or machine).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Releases the session child `pid` (as this process sees it) that was forked with `channel`'s
/// other ends: adds it to each of the spec's cgroups, waits for it to enter its user namespace,
/// writes `setgroups` (`deny`), `uid_map` and `gid_map` (`1000 <uid> 1`), releases it, and waits
/// until its checklist is complete. Returns the child's report line.
///
/// On error the child has been sent SIGKILL (it is pid 1 of its pid namespace: whatever it
/// started dies with it); the caller still reaps it.
pub fn release_session(
    pid: i32,
    spec: &HardenSpec,
    mut channel: ParentChannel,
) -> Result<String, ReleaseError> {
    let outcome = release_child(pid, spec, &mut channel);
    if outcome.is_err() && pid > 0 {
        // Before the pipes close: the child must not see end of file and run its own error path
        // first. ESRCH only means it already ended; the caller has not reaped it, so the pid is
        // still its.
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    drop(channel);
    outcome
}

fn release_child(
    pid: i32,
    spec: &HardenSpec,
    channel: &mut ParentChannel,
) -> Result<String, ReleaseError> {
    if pid <= 0 {
        return Err(ReleaseError::InvalidPid(pid));
    }
    spec.validate().map_err(|error| match error {
        HardenError::InvalidSpec(reason) => ReleaseError::InvalidSpec(reason),
        other => ReleaseError::InvalidSpec(other.to_string()),
    })?;
    // while the child sets itself up; v1 groups it joins itself (see the module docs)
    let pid_text = pid.to_string();
    for cgroup in spec.cgroups.iter().filter(|dir| !joined_by_the_child(dir)) {
        let file = cgroup.join("cgroup.procs");
        write_once(&file, &pid_text).map_err(|source| ReleaseError::Cgroup { file, source })?;
    }

    let deadline = Instant::now() + RELEASE_TIMEOUT;
    let first = receive(channel, deadline, "entering its user namespace")?;
    if first != [UNSHARED] {
        return Err(unexpected(&first));
    }

    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let map = format!("{SESSION_ID_INSIDE} {} 1\n", spec.uid);
    // setgroups first: the kernel refuses `deny` once gid_map is written.
    for (name, content) in [("setgroups", "deny"), ("uid_map", &map), ("gid_map", &map)] {
        let file = proc_dir.join(name);
        write_once(&file, content).map_err(|source| ReleaseError::IdMap { file, source })?;
    }
    channel
        .release()
        .map_err(|_| ReleaseError::ChildGone("waiting for its id maps"))?;

    let deadline = Instant::now() + RELEASE_TIMEOUT;
    let last = receive(channel, deadline, "completing its checklist")?;
    match last.split_first() {
        Some((&DONE, report)) => Ok(String::from_utf8_lossy(report).into_owned()),
        _ => Err(unexpected(&last)),
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

/// One message, or the reason there is none.
fn receive(
    channel: &mut ParentChannel,
    deadline: Instant,
    phase: &'static str,
) -> Result<Vec<u8>, ReleaseError> {
    match channel.receive(deadline).map_err(ReleaseError::Channel)? {
        None => Err(ReleaseError::TimedOut {
            seconds: RELEASE_TIMEOUT.as_secs(),
            phase,
        }),
        Some(message) if message.is_empty() => Err(ReleaseError::ChildGone(phase)),
        Some(message) => Ok(message),
    }
}

/// The child's own error, or a protocol error for anything else.
fn unexpected(message: &[u8]) -> ReleaseError {
    match message.split_first() {
        Some((&FAILED, error)) => ReleaseError::ChildFailed(String::from_utf8_lossy(error).into()),
        _ => ReleaseError::Protocol(String::from_utf8_lossy(message).into_owned()),
    }
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
