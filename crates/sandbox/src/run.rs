//! One run in a session, whole: what to run, where, for whom, under which limits, with which
//! files and environment, where its output and upcalls go and what cancels it; and what came
//! of it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::policy::Limits;
use crate::protocol::{ExecOutcome, OutputStream};
use crate::upcall::UpcallHandler;

/// The longest session id a caller may choose, in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;
/// The most files one run may upload.
pub const MAX_UPLOAD_FILES: usize = 100;
/// The longest path of an uploaded or read file, in bytes.
pub const MAX_WORKSPACE_PATH_BYTES: usize = 4096;
/// Most variables one run may be given.
pub const MAX_RUN_ENV: usize = 64;
/// Most bytes of all names and values of one run's environment.
pub const MAX_RUN_ENV_BYTES: usize = 256 * 1024;
/// The room of a run's output channel, in chunks: what may wait for a caller that does not keep
/// up before newer chunks are dropped (a session cannot pile up tiny chunks in the server).
pub const OUTPUT_QUEUE: usize = 1024;

/// What to run in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// Python source, run with notebook semantics in the session's namespace.
    Python {
        /// the cell
        code: String,
    },
    /// A command line for `/bin/bash -c`, run in the workspace.
    Bash {
        /// the command line
        command: String,
    },
    /// One SQL statement (to write, a script) on a SQLite file of the workspace, run by the
    /// session itself, so that the file is opened with the session's identity and confinement.
    Sqlite(SqliteWork),
}

/// A statement on a SQLite file of a session's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteWork {
    /// The file, relative to the workspace (checked like an upload's path).
    pub path: String,
    /// The statement; when `write`, possibly several, run as one transaction.
    pub statement: String,
    /// `false`: the file is opened read-only, so SQLite itself refuses any change.
    pub write: bool,
    /// Rows returned at most (the rest is left out, and the answer says so).
    pub max_rows: u64,
    /// About how many bytes of values are returned at most.
    pub max_bytes: u64,
}

/// A file to write into a session's workspace before its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceFile {
    /// Relative to the workspace; missing directories are created.
    pub path: String,
    /// The bytes (an existing file is replaced).
    pub content: Vec<u8>,
}

/// What makes a caller's workspace path unusable, whatever the workspace holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    /// empty, or only `.` and `/`
    #[error("the path names no file")]
    Empty,
    /// starts with `/`
    #[error("the path must be relative to the workspace")]
    Absolute,
    /// has a `..` component
    #[error("the path must not contain '..'")]
    ParentDir,
    /// has a NUL byte
    #[error("the path contains a NUL byte")]
    Nul,
    /// longer than [`MAX_WORKSPACE_PATH_BYTES`]
    #[error("the path is longer than {MAX_WORKSPACE_PATH_BYTES} bytes")]
    TooLong,
}

/// The components of a caller's relative workspace path (`.` and empty ones dropped), or why it
/// is refused: the one rule for every path a caller names (uploads, links, reads).
pub fn workspace_path_parts(path: &str) -> Result<Vec<&str>, PathProblem> {
    if path.len() > MAX_WORKSPACE_PATH_BYTES {
        return Err(PathProblem::TooLong);
    }
    if path.contains('\0') {
        return Err(PathProblem::Nul);
    }
    if path.starts_with('/') {
        return Err(PathProblem::Absolute);
    }
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(PathProblem::ParentDir);
    }
    if parts.is_empty() {
        return Err(PathProblem::Empty);
    }
    Ok(parts)
}

/// A file read from a session's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRead {
    /// Its content.
    pub bytes: Vec<u8>,
    /// Its size in bytes.
    pub size: u64,
}

/// Output streamed while a run goes on (only when the run has an output channel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputChunk {
    /// stdout or stderr
    pub stream: OutputStream,
    /// The text, decoded as UTF-8 with replacement characters.
    pub data: String,
}

/// One run for [`SandboxSessions::run`](crate::SandboxSessions::run).
pub struct RunRequest {
    /// The account the session belongs to (never empty).
    pub account: String,
    /// The caller's session id; `None`: a fresh session, closed after the run.
    pub session_id: Option<String>,
    /// Python code or a bash command line.
    pub work: Work,
    /// The run's limits.
    pub limits: Limits,
    /// Files written into the workspace before the work runs; if one cannot be, nothing runs.
    pub files: Vec<WorkspaceFile>,
    /// Added to the environment of this run only (see [`check_env`]); values may be secrets and
    /// are never shown by `Debug` or in an error.
    pub env: BTreeMap<String, String>,
    /// Receives output while the work runs, in order. The implementation never waits for it:
    /// while the channel is full, newer chunks are dropped (the outcome holds all the output).
    pub output: Option<mpsc::Sender<OutputChunk>>,
    /// Answers upcalls the code makes while it runs; without one, every upcall is answered
    /// with an error.
    pub upcalls: Option<Arc<dyn UpcallHandler>>,
    /// Cancels the run: the code is interrupted, the session survives.
    pub cancel: Option<CancellationToken>,
    /// Run only in the caller's session as it lives now: never start one (nor a fresh one for
    /// a dead or expired session); refused when there is none. For reads.
    pub existing_only: bool,
    /// Keep the whole of a stream that passes its inline limit in a file of the workspace (the
    /// outcome names it): for a session that outlives the run, whose files can be linked.
    pub spill: bool,
    /// What the session's code may reach through the egress proxy during this run; `None`:
    /// nothing (every connection refused).
    pub egress: Option<crate::EgressGrant>,
}

impl RunRequest {
    /// `work` for `account` in `session_id` under `limits`: no files, no environment, no output
    /// channel, no upcalls, no cancellation.
    pub fn new(
        account: impl Into<String>,
        session_id: Option<String>,
        work: Work,
        limits: Limits,
    ) -> Self {
        Self {
            account: account.into(),
            session_id,
            work,
            limits,
            files: Vec::new(),
            env: BTreeMap::new(),
            output: None,
            upcalls: None,
            cancel: None,
            existing_only: false,
            spill: false,
            egress: None,
        }
    }
}

impl fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunRequest")
            .field("account", &self.account)
            .field("session_id", &self.session_id)
            .field("work", &self.work)
            .field("limits", &self.limits)
            .field("files", &self.files.len())
            // names only: values may be secrets
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("output", &self.output.is_some())
            .field("upcalls", &self.upcalls.is_some())
            .field("cancel", &self.cancel.is_some())
            .field("existing_only", &self.existing_only)
            .field("spill", &self.spill)
            .field("egress", &self.egress)
            .finish()
    }
}

/// What came of a run, with what the caller should know about its session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// The session's result.
    pub outcome: ExecOutcome,
    /// The run had a new interpreter (a new id, no id, or the old session was gone).
    pub fresh: bool,
    /// The session id had expired (idle too long): its variables and files are gone.
    pub expired: bool,
    /// The session's process id, on its host (for diagnostics).
    pub pid: i32,
    /// The session's workspace directory, on its host (for diagnostics).
    pub workspace: std::path::PathBuf,
    /// Processes of the session the kernel killed for want of memory during this run (say a
    /// bash command's); the interpreter's own such death is an error instead.
    pub oom_kills: u64,
    /// The session had been hibernated (or its process ended): this run restored it from its
    /// checkpoint first.
    pub restored: Option<Restored>,
    /// The session had a checkpoint and nothing of it could be brought back (damaged, or
    /// sealed under a key this service no longer has): why. The run had a fresh session.
    pub lost_checkpoint: Option<String>,
    /// The execution node the session lived on was lost (it stopped or was cut off): this run
    /// is on another node, restored from the session's checkpoint if it had one, else fresh.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_lost: bool,
    /// Where the run's code went through the egress proxy, in order (refused attempts too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::Destination>,
}

/// What a run found when it restored its session from a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// When the checkpoint it came from was written.
    pub saved_at: std::time::SystemTime,
    /// The newest checkpoint could not be read: this one is the one before it.
    pub fell_back: bool,
    /// Globals that could not be kept or brought back, each named with why.
    pub not_restored: Vec<NotRestored>,
    /// The names of the environment variables the session's earlier runs were given (never
    /// their values): what it shows may hold their values, so the caller redacts them. A run
    /// that restores a session with some streams no output (it all comes in the outcome).
    pub env_names: Vec<String>,
}

/// A global of a session that a restore could not bring back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRestored {
    /// Its name (`*` for the whole Python state).
    pub name: String,
    /// Its value's type name (empty when not known).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Why, in one line.
    pub reason: String,
}

/// An environment a run cannot be given. Never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid environment for the run: {0}")]
pub struct EnvError(String);

/// Refuses an environment a run cannot be given: names `[A-Za-z_][A-Za-z0-9_]*` of at most 128
/// bytes, values without NUL, at most [`MAX_RUN_ENV`] variables and [`MAX_RUN_ENV_BYTES`].
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), EnvError> {
    if env.len() > MAX_RUN_ENV {
        return Err(EnvError(format!(
            "{} variables, at most {MAX_RUN_ENV}",
            env.len()
        )));
    }
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_RUN_ENV_BYTES {
        return Err(EnvError(format!(
            "{bytes} bytes, at most {MAX_RUN_ENV_BYTES}"
        )));
    }
    for (name, value) in env {
        let mut chars = name.chars();
        let good_name = name.len() <= 128
            && chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !good_name {
            return Err(EnvError(
                "a name is not [A-Za-z_][A-Za-z0-9_]* of at most 128 bytes".to_owned(),
            ));
        }
        if value.contains('\0') {
            return Err(EnvError(format!("the value of {name} holds a NUL byte")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_environment_is_checked_without_showing_a_value() {
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        check_env(&env(&[("API_KEY", "s3cret"), ("_x1", "")])).unwrap();
        for bad in ["1A", "A-B", "", "Ä"] {
            assert!(check_env(&env(&[(bad, "v")])).is_err(), "{bad:?}");
        }
        let nul = check_env(&env(&[("TOKEN", "top\0secret")])).unwrap_err();
        assert!(nul.to_string().contains("TOKEN"));
        assert!(!nul.to_string().contains("secret"), "{nul}");
        let many: BTreeMap<String, String> = (0..=MAX_RUN_ENV)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(check_env(&many).is_err());
        let big = env(&[("BIG", &"x".repeat(MAX_RUN_ENV_BYTES))]);
        assert!(check_env(&big).is_err());
    }

    #[test]
    fn debug_never_shows_an_environment_value() {
        let mut request = RunRequest::new(
            "acct",
            None,
            Work::Bash {
                command: "env".into(),
            },
            crate::LimitSettings::default().for_call(None).unwrap(),
        );
        request.env.insert("API_KEY".into(), "s3cret-value".into());
        let shown = format!("{request:?}");
        assert!(
            shown.contains("API_KEY") && !shown.contains("s3cret-value"),
            "{shown}"
        );
    }
}
