//! The zygote's pid namespace dance around a hardened fork, without an extra process:
//! `unshare(CLONE_NEWPID)` makes the *next* child pid 1 of a new pid namespace; after the fork
//! the zygote points its `pid_ns_for_children` back at its own namespace with `setns` on a
//! descriptor of `/proc/self/ns/pid` opened once. Without that, the next `unshare(CLONE_NEWPID)`
//! fails with `EINVAL` and, worse, the next plain fork would land in the last session's
//! namespace.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;

use crate::channel::{ChildChannel, ParentChannel, session_channel};
use crate::sys;

/// The zygote's own pid namespace, opened before its first hardened fork.
static OWN_PID_NAMESPACE: OnceLock<OwnedFd> = OnceLock::new();

/// Opens `/proc/self/ns/pid` once (close-on-exec); later calls do nothing. The zygote calls it at
/// start-up, [`before_session_fork`] again to be sure.
pub fn remember_pid_namespace() -> io::Result<()> {
    if OWN_PID_NAMESPACE.get().is_some() {
        return Ok(());
    }
    let fd = OwnedFd::from(File::open("/proc/self/ns/pid")?);
    // A concurrent first call may have won; either descriptor names the same namespace.
    let _ = OWN_PID_NAMESPACE.set(fd);
    Ok(())
}

/// `unshare(CLONE_NEWPID)`: the next child this process forks is pid 1 of a new pid namespace.
/// Must be followed by [`after_session_fork`] in this process, whether the fork succeeded or not.
///
/// Also compiles the seccomp programs once, if [`crate::prepare_seccomp`] was not called, so that
/// this and every later child only installs them. A failure to compile is left to the child,
/// which then fails step (h) and says why (closed, as before).
pub fn before_session_fork() -> io::Result<()> {
    remember_pid_namespace()?;
    let _ = crate::seccomp_filter::prepare();
    sys::unshare(libc::CLONE_NEWPID)
}

/// Puts this process's `pid_ns_for_children` back to its own pid namespace. If this fails the
/// process must not fork again (its children would join the session's namespace): exit.
pub fn after_session_fork() -> io::Result<()> {
    let fd = OWN_PID_NAMESPACE.get().ok_or_else(|| {
        io::Error::other("the own pid namespace was never opened (remember_pid_namespace)")
    })?;
    sys::setns(fd.as_fd(), libc::CLONE_NEWPID)
}

/// What [`fork_session_child`] returned in this process.
#[derive(Debug)]
pub enum SessionFork {
    /// In the new child: harden with this channel ([`crate::harden_session_with_report`]).
    Child(ChildChannel),
    /// In the caller: release `pid` with this channel ([`crate::release_session`]).
    Parent {
        /// The child's pid in the caller's pid namespace.
        pid: i32,
        /// The caller's ends of the pipes.
        channel: ParentChannel,
    },
}

/// The whole zygote side of a hardened fork for a single-threaded Rust caller (the probe):
/// pipes, [`before_session_fork`], `fork`, [`after_session_fork`]. An error from the last step
/// means this process must exit (the child has been killed).
pub fn fork_session_child() -> io::Result<SessionFork> {
    let (parent, child) = session_channel()?;
    before_session_fork()?;
    let forked = match sys::fork() {
        Ok(sys::Forked::Child) => {
            drop(parent);
            return Ok(SessionFork::Child(child));
        }
        Ok(sys::Forked::Parent(pid)) => Ok(pid),
        Err(error) => Err(error),
    };
    // In the caller, whether the fork worked or not.
    let restored = after_session_fork();
    drop(child);
    let pid = match forked {
        Ok(pid) => pid,
        Err(error) => {
            restored?;
            return Err(error);
        }
    };
    if let Err(error) = restored {
        let _ = sys::kill(pid, libc::SIGKILL);
        return Err(io::Error::other(format!(
            "cannot restore the pid namespace for children: {error}"
        )));
    }
    Ok(SessionFork::Parent {
        pid,
        channel: parent,
    })
}

/// Waits for a child of this process to end; its raw wait status.
pub fn wait_for_child(pid: i32) -> io::Result<i32> {
    sys::wait_for(pid)
}
