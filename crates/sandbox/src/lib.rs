//! The sandbox seam: what the service asks of sessions and what it gets back, with no
//! implementation behind it. `app` knows only this crate ([`SandboxSessions`]); the binary wires in the
//! in-process implementation (`toolgate-sandbox-manager`), and one on another host could carry
//! the same values over a network: every request, output chunk, upcall and outcome here is plain
//! data, and output and cancellation travel as a channel and a token, not as borrowed callbacks.
//!
//! - [`SandboxSessions`]: run work in a session, read a workspace file, close a session.
//! - [`RunRequest`] / [`RunOutcome`]: one run, whole (account, session, work, files, limits,
//!   environment, output channel, upcall handler, cancellation) and what came of it.
//! - [`upcall`]: code in a session asking the service for something (a typed request) and
//!   waiting for its typed answer; the session's identity is attached by the implementation.
//! - [`checkpoints`]: where hibernated sessions' images are kept ([`CheckpointStore`]).
//! - [`policy`]: the limits a session runs under.
//! - [`stages`]: a request's stage clock (the server's `Server-Timing` answer header).
//! - [`protocol`] and [`frame`]: the typed frames of `runtime/PROTOCOL.md` and their framing.

pub mod checkpoints;
pub mod egress;
pub mod frame;
pub mod policy;
pub mod protocol;
mod run;
mod sessions;
pub mod stages;
pub mod upcall;
mod upcall_values;

pub use checkpoints::{
    CheckpointError, CheckpointInfo, CheckpointKey, CheckpointStore, LoadedCheckpoint,
    account_dir_name,
};
pub use egress::{Destination, EdgeSecret, EgressGrant, EgressLimits};
pub use frame::{FrameError, MAX_FRAME_BYTES};
pub use policy::{LimitSettings, Limits, LimitsError};
pub use protocol::{
    DisplayData, ExecOutcome, Interruption, OutputStream, PyError, RequestKind, SpilledStream,
};
pub use run::{
    EnvError, MAX_RUN_ENV, MAX_RUN_ENV_BYTES, MAX_SESSION_ID_BYTES, MAX_UPLOAD_FILES,
    MAX_WORKSPACE_PATH_BYTES, NotRestored, OUTPUT_QUEUE, OutputChunk, PathProblem, Restored,
    RunOutcome, RunRequest, SqliteWork, Work, WorkspaceFile, WorkspaceRead, check_env,
    workspace_path_parts,
};
pub use sessions::{SandboxSessionInfo, SandboxSessions, SandboxSessionsError, SessionState};
