//! The in-process implementation of the sandbox seam ([`toolgate_sandbox::SandboxSessions`]):
//! starting the Python zygote, forking sessions from it, running calls in them with time
//! limits, cancellation and upcalls, and a manager that keeps each account's sessions apart,
//! expires idle ones and caps how many an account may have.
//!
//! Layers, each usable on its own:
//! - [`Zygote`]: one fork server process and its control channel.
//! - [`Session`]: one session child; calls run one at a time, in order.
//! - [`SandboxManager`]: sessions by (account, caller's session id), with workspaces on disk
//!   (size-capped tmpfs when it may mount), a cgroup and a host uid per session, files in and
//!   out of a workspace, and a few warm sessions started ahead of time for new ones to take.
//!
//! Everything a session sends is hostile input (its code can write on its socket): it is read
//! by `session_input` and decoded within the caps of `bounded`.

mod bounded;
mod cgroup;
mod driver;
mod files;
mod frame_io;
#[cfg(test)]
mod frame_proptests;
mod hibernation;
mod image;
mod incarnation;
mod keep;
mod manager;
mod manager_types;
mod manager_views;
mod mountinfo;
mod seam;
mod session;
mod session_error;
mod session_input;
mod session_table;
mod sweep;
mod upcalls;
mod warm;
mod warming;
mod workspace;
mod zygote;

pub use bounded::{
    CALL_FRAME_BYTES, MAX_ERROR_CHARS, MAX_ERROR_TYPE_CHARS, MAX_IMAGES, MAX_IMAGES_CHARS,
    MAX_OUTPUT_CHARS, MAX_PNG_CHARS, MAX_TEXT_CHARS, MAX_UPCALL_FRAME_BYTES, MAX_UPCALLS_IN_FLIGHT,
};
pub use cgroup::{CgroupError, CgroupMode, CgroupVersion};
pub use files::{FileError, FileProblem};
pub use manager::SandboxManager;
pub use manager_types::{Budget, Isolation, Keeping, Load, ManagerConfig, ManagerError};
pub use session::SandboxSession;
pub use session_error::{KillReason, SessionError};
pub use zygote::{
    DEFAULT_MAX_FILE_BYTES, DEFAULT_SANDBOX_UID, ForkOptions, Zygote, ZygoteConfig, ZygoteError,
};
// the seam's values this crate's own API takes and gives
pub use toolgate_sandbox::protocol::{ExitInfo, Hello};
pub use toolgate_sandbox::{
    DisplayData, ExecOutcome, Interruption, MAX_SESSION_ID_BYTES, MAX_UPLOAD_FILES,
    MAX_WORKSPACE_PATH_BYTES, OUTPUT_QUEUE, OutputChunk, OutputStream, PyError, RequestKind,
    RunOutcome, RunRequest, Work, WorkspaceFile, WorkspaceRead,
};

/// The name of a signal number, as Python's `signal.Signals(n).name` gives it.
pub(crate) fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|n| NAMES.get(n))
        .filter(|name| !name.is_empty())
        .map_or_else(|| format!("SIG{signal}"), |name| (*name).to_owned())
}
