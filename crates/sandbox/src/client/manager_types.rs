//! The session manager's public values: its settings, its errors, a call's outcome.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::session_error::SessionError;
use super::wire::ExecOutcome;
use super::zygote::{ZygoteConfig, ZygoteError};

/// The longest session id a caller may choose, in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// The manager's settings.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// How to start the zygote.
    pub zygote: ZygoteConfig,
    /// Where session workspaces live: `<root>/<account>/<sha256 of the session id>`.
    pub root: PathBuf,
    /// A session without a call for this long is closed.
    pub idle_ttl: Duration,
    /// Live sessions one account may have (calls without a session id count while they run).
    pub max_sessions_per_account: usize,
}

impl ManagerConfig {
    /// The defaults: 20 minutes idle, 10 sessions per account.
    pub fn new(zygote: ZygoteConfig, root: impl Into<PathBuf>) -> Self {
        Self {
            zygote,
            root: root.into(),
            idle_ttl: Duration::from_secs(20 * 60),
            max_sessions_per_account: 10,
        }
    }
}

/// Why a call could not run (its own failures are [`ManagerError::Session`]).
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// the account is at its cap of live sessions
    #[error(
        "this account already has {limit} live sessions, the most it may have: close one, or \
         wait until an idle one expires ({} s without a call)",
        .idle_ttl.as_secs()
    )]
    TooManySessions {
        /// the cap
        limit: usize,
        /// the idle time after which a session is closed
        idle_ttl: Duration,
    },
    /// the session id is empty or too long
    #[error("session_id must be 1 to {MAX_SESSION_ID_BYTES} bytes long")]
    InvalidSessionId,
    /// the account id is empty
    #[error("the account id is empty")]
    InvalidAccount,
    /// the zygote could not be started or could not fork
    #[error(transparent)]
    Zygote(#[from] ZygoteError),
    /// the workspace directory could not be prepared
    #[error("could not prepare the session workspace {path}: {source}")]
    Workspace {
        /// the directory
        path: PathBuf,
        /// what failed
        source: io::Error,
    },
    /// the call ran and failed (killed, died, rejected)
    #[error(transparent)]
    Session(#[from] SessionError),
    /// the manager was shut down
    #[error("the session manager has shut down")]
    ShutDown,
}

/// The outcome of a call, with what the caller should know about its session.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The session's result frame.
    pub outcome: ExecOutcome,
    /// The call ran in a new interpreter (a new id, no id, or the old session was gone).
    pub fresh: bool,
    /// The session id had expired (idle too long): its variables and files are gone.
    pub expired: bool,
    /// The session child's process id.
    pub pid: i32,
    /// The session's workspace directory.
    pub workspace: PathBuf,
}
