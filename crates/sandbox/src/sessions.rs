//! The seam between the service's use cases and whatever runs sessions.

use std::time::Duration;

use async_trait::async_trait;

use crate::run::{RunOutcome, RunRequest, WorkspaceRead};

/// Sessions of every account: one Python interpreter (with bash and whatever it starts) and a
/// workspace each, kept between runs that name the same account and session id.
///
/// Sessions are private to their account: the same id under another account is another
/// session. Runs of one session happen one at a time, in order.
#[async_trait]
pub trait SandboxSessions: Send + Sync {
    /// Runs `request`'s work in its account's session (started when it does not exist, or has
    /// expired: the outcome says so), or, without a session id, in a fresh session closed
    /// after the run. The files are written first. The run ends at its time limit or when
    /// cancelled by interrupting the code (the session survives; the outcome says why);
    /// code that ignores the interrupt is killed with its session. A session that dies during
    /// the run is gone: its next run starts fresh.
    ///
    /// `Ok` whatever the code did (an exception, a non-zero exit status, a time-out are in the
    /// outcome); `Err` when nothing ran ([`SandboxSessionsError::Refused`],
    /// [`SandboxSessionsError::Unavailable`]) or the session was lost ([`SandboxSessionsError::Failed`]).
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError>;

    /// One regular file of an existing session's workspace, of at most `max_bytes`. Never
    /// starts a session, never follows a symbolic link, never waits for a running call.
    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError>;

    /// Ends the account's session `session_id` now, if it lives; its variables and files go
    /// with it. `false` when there was no such live session.
    async fn close(&self, account: &str, session_id: &str) -> bool;

    /// How long a session may sit idle before it expires (the operator's setting).
    fn idle_ttl(&self) -> Duration;

    /// The account's live sessions that have a caller's id, ordered by id.
    async fn list(&self, account: &str) -> Vec<SandboxSessionInfo>;
}

/// One live session as its owner may see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxSessionInfo {
    /// The caller's session id.
    pub id: String,
    /// Since it was opened.
    pub age: Duration,
    /// Since its last call began or ended.
    pub idle: Duration,
    /// What its processes and workspace use now (`None` where it cannot be read).
    pub memory_bytes: Option<u64>,
    /// A call is running in it now.
    pub busy: bool,
    /// Its newest checkpoint, if it has one. A hibernated session has one and no processes
    /// (no memory, never busy; `age` and `idle` count from that checkpoint).
    pub checkpoint: Option<crate::CheckpointInfo>,
    /// Live, hibernated, or dropped.
    pub state: SessionState,
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Its processes run (idle or busy).
    Live,
    /// Only its checkpoint is kept; its next call restores it.
    Hibernated,
    /// Its checkpoint was deleted to keep its account within its checkpoint quota (the oldest
    /// hibernated sessions go first); its next call starts fresh and says so.
    Dropped,
}

impl SessionState {
    /// `live`, `hibernated` or `dropped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Hibernated => "hibernated",
            Self::Dropped => "dropped",
        }
    }
}

/// Why [`SandboxSessions`] could not do what was asked. The messages are for the caller; the source
/// of [`SandboxSessionsError::Unavailable`] is for logs only.
#[derive(Debug, thiserror::Error)]
pub enum SandboxSessionsError {
    /// Nothing ran: a limit was reached, the request was invalid, or the session named does
    /// not exist. The message says what to change.
    #[error("{0}")]
    Refused(String),
    /// The run started and its session was lost (killed after ignoring an interrupt, out of
    /// memory, dead); its variables are gone. The message says how.
    #[error("{0}")]
    Failed(String),
    /// The sandbox itself could not serve the request (a session could not be started or
    /// prepared); nothing ran.
    #[error(
        "the sandbox could not start a session right now; nothing ran. Please retry in a moment."
    )]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}
