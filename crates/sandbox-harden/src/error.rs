//! One error per checklist step, and the zygote's side's errors ([`ReleaseError`]). Each message
//! names its step, so a log line alone tells how far the confinement got. After any of them the
//! child is partly confined and must exit without running the session's code.

use std::io;
use std::path::PathBuf;

/// Why a session child could not be hardened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HardenError {
    /// The spec itself is unusable.
    #[error("invalid harden spec: {0}")]
    InvalidSpec(String),
    /// Landlock and seccomp bind only the calling thread here, so other threads would escape.
    #[error("step (0) single-thread check: the process has {threads} threads, expected 1")]
    NotSingleThreaded {
        /// Threads counted in `/proc/self/status`.
        threads: usize,
    },
    /// The thread count could not be read.
    #[error("step (0) single-thread check: cannot read /proc/self/status: {0}")]
    ThreadCount(#[source] io::Error),
    /// The child could not move itself into one of its cgroups (v1's `tasks` file).
    #[error("step (0) join cgroup {}: {source}", file.display())]
    JoinCgroup {
        /// The `tasks` file written.
        file: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// `unshare(2)` of the net, ipc, uts and mount namespaces failed.
    #[error("step (a) unshare namespaces: {0}")]
    Unshare(#[source] io::Error),
    /// Making every mount private (`MS_REC | MS_PRIVATE` on `/`) failed.
    #[error("step (b) make mounts private: {0}")]
    MountsPrivate(#[source] io::Error),
    /// One step of building the session's root (a mount, a mount point, `pivot_root`) failed.
    #[error("step (b) mount {what} on {}: {source}", target.display())]
    Mount {
        /// What was being mounted.
        what: &'static str,
        /// Where.
        target: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// `sethostname(2)` failed.
    #[error("step (c) set hostname: {0}")]
    Hostname(#[source] io::Error),
    /// A call of step (d) (`setgroups`, `unshare(CLONE_NEWUSER)`, `setresgid`, `setresuid`,
    /// a `prctl` or `capset`) failed.
    #[error("step (d) user namespace: {call}: {source}")]
    Identity {
        /// The call that failed.
        call: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The zygote did not release the session (no id maps written, or it is gone).
    #[error("step (d) user namespace: admission by the zygote: {0}")]
    Admission(String),
    /// `setrlimit(2)` failed.
    #[error("step (e) setrlimit {resource}: {source}")]
    Rlimit {
        /// `RLIMIT_CORE`, `RLIMIT_NOFILE` or `RLIMIT_FSIZE`.
        resource: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("step (f) no_new_privs: {0}")]
    NoNewPrivs(#[source] io::Error),
    /// A path of the spec could not be opened for a Landlock rule.
    #[error("step (g) landlock: cannot open {}: {source}", path.display())]
    LandlockPath {
        /// The path as given in the spec.
        path: PathBuf,
        /// Why it could not be opened.
        source: io::Error,
    },
    /// Building or enforcing the Landlock ruleset failed.
    #[error("step (g) landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// The kernel enforces no Landlock at all; running on would leave the filesystem open.
    #[error("step (g) landlock: not enforced by this kernel ({0}); refusing to run unconfined")]
    LandlockNotEnforced(String),
    /// The seccomp filter could not be compiled.
    #[error("step (h) seccomp: cannot build the filter: {0}")]
    SeccompBuild(#[source] seccompiler::BackendError),
    /// The kernel refused the seccomp filter.
    #[error("step (h) seccomp: cannot install the filter: {0}")]
    SeccompInstall(#[source] seccompiler::Error),
}

/// Why the zygote's side of a hardened fork ([`crate::release_session`]) failed. The child has been
/// sent SIGKILL by then.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The spec is unusable (the child refuses it too).
    #[error("admission: invalid harden spec: {0}")]
    InvalidSpec(String),
    /// Not a pid this function may signal.
    #[error("admission: invalid child pid {0}")]
    InvalidPid(i32),
    /// Reading or writing the synchronisation pipes failed.
    #[error("admission: synchronisation pipe: {0}")]
    Channel(#[source] io::Error),
    /// The child did not answer in time.
    #[error("admission: the session child sent nothing within {seconds} s while {phase}")]
    TimedOut {
        /// The limit.
        seconds: u64,
        /// What it was expected to do.
        phase: &'static str,
    },
    /// The child closed its end (it ended) without a word.
    #[error("admission: the session child ended while {0}")]
    ChildGone(&'static str),
    /// The child reported its own failure, named by its step.
    #[error("session child: {0}")]
    ChildFailed(String),
    /// The child sent something outside the protocol.
    #[error("admission: unexpected message from the session child: {0:?}")]
    Protocol(String),
    /// Writing `setgroups`, `uid_map` or `gid_map` of the child failed.
    #[error("admission: writing {}: {source}", file.display())]
    IdMap {
        /// `/proc/<pid>/uid_map` and so on.
        file: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// Moving the child into a cgroup failed.
    #[error("admission: adding the session child to {}: {source}", file.display())]
    Cgroup {
        /// `<cgroup>/cgroup.procs`.
        file: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
}
