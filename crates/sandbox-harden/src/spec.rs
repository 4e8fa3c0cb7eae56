//! What a session child is confined to: the public policy value, separate from the code that
//! enforces it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::HardenError;

/// The longest host name the kernel accepts (`HOST_NAME_MAX`).
const HOST_NAME_MAX: usize = 64;

/// The confinement of one session child, as the zygote sends it (JSON).
///
/// Unknown fields are refused, so a misspelt `"netwrok": true` is an error rather than a silently
/// ignored wish.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardenSpec {
    /// The session's workspace: full access (read, write, create, remove, execute), except
    /// creating device nodes.
    pub workspace: PathBuf,
    /// The session's private temporary directory: the same access as the workspace.
    pub tmp: PathBuf,
    /// Read and execute only: the Python runtime, `/usr`, `/lib`, `/etc/ssl`, … Every path must
    /// exist; a file grants access to that file, a directory to everything beneath it. Not
    /// `/proc` of the host's pid namespace: it exposes other processes' environments (see the
    /// crate docs).
    pub read_only: Vec<PathBuf>,
    /// `RLIMIT_NOFILE`, soft and hard.
    pub max_open_files: u64,
    /// `RLIMIT_FSIZE`, soft and hard: the largest file the session may write, in bytes.
    pub max_file_bytes: u64,
    /// The host name seen inside (its own UTS namespace).
    pub hostname: String,
    /// `false`: a new, empty network namespace, no socket but `AF_UNIX`, no TCP bind or connect.
    /// `true`: the caller's network namespace and sockets.
    pub network: bool,
}

impl HardenSpec {
    /// Checks what the kernel would refuse late or, worse, accept with a surprising meaning
    /// (a relative path resolved against whatever the current directory happens to be).
    pub(crate) fn validate(&self) -> Result<(), HardenError> {
        let invalid = |reason: String| Err(HardenError::InvalidSpec(reason));
        for (field, path) in [("workspace", &self.workspace), ("tmp", &self.tmp)]
            .into_iter()
            .chain(self.read_only.iter().map(|path| ("read_only", path)))
        {
            if !path.is_absolute() {
                return invalid(format!("{field} path {} is not absolute", path.display()));
            }
        }
        if self.hostname.is_empty() || self.hostname.len() > HOST_NAME_MAX {
            return invalid(format!("hostname must have 1 to {HOST_NAME_MAX} bytes"));
        }
        if self.hostname.contains('\0') {
            return invalid("hostname contains a NUL byte".to_owned());
        }
        if self.max_open_files == 0 {
            return invalid("max_open_files must be at least 1".to_owned());
        }
        if self.max_file_bytes == 0 {
            return invalid("max_file_bytes must be at least 1".to_owned());
        }
        Ok(())
    }

    /// The directories the session may write to.
    pub(crate) fn writable(&self) -> [&Path; 2] {
        [&self.workspace, &self.tmp]
    }
}

/// How far Landlock could be enforced by the running kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockEnforcement {
    /// Every requested restriction is enforced.
    Full,
    /// The kernel lacks some requested rights; the others are enforced (best effort).
    Partial,
}

/// What [`crate::harden_session_with_report`] achieved, for the caller's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardenReport {
    /// Landlock's enforcement.
    pub landlock: LandlockEnforcement,
    /// The running kernel's Landlock ABI (capped at the newest the `landlock` crate knows). The
    /// rights asked for are those of ABI 7 whatever this says.
    pub landlock_abi: u32,
    /// How many syscalls the seccomp deny-list refuses outright (argument-filtered ones
    /// included).
    pub seccomp_denied_syscalls: usize,
    /// Wall-clock time of the whole checklist.
    pub elapsed: Duration,
}

impl fmt::Display for HardenReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let landlock = match self.landlock {
            LandlockEnforcement::Full => "fully_enforced",
            LandlockEnforcement::Partial => "partially_enforced",
        };
        write!(
            f,
            "hardened: landlock={landlock} kernel_landlock_abi={} seccomp_denied_syscalls={} elapsed_us={}",
            self.landlock_abi,
            self.seccomp_denied_syscalls,
            self.elapsed.as_micros()
        )
    }
}
