//! MCP tasks (a `tools/call` that runs on after its request was answered) as rows, so that any
//! front end on one database answers `tasks/get` for any of them, and a task whose process died
//! ends `failed` instead of hanging. A row is the task's id, owner, state, messages and times; its
//! outcome (the tool's result or the JSON-RPC error, as JSON text) once it ended. Times are the
//! store's clock in Unix milliseconds, as for legacy MCP sessions.
//!
//! The process running a task is its *runner* (an id the process picks at start). It beats for
//! all its running tasks at once; a task whose runner stopped beating is failed by whichever
//! process sweeps first. Only a task that has not ended changes: the first end written wins, so
//! a cancel and a finish racing leave one answer.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::AccountId;

use crate::StoreError;

/// Where a task stands, as MCP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Running.
    Working,
    /// Waiting for the client's input (`tasks/update`).
    InputRequired,
    /// Ended with a result (also a tool's own error result).
    Completed,
    /// Ended without a result: a JSON-RPC error, a lost runner.
    Failed,
    /// Ended by `tasks/cancel` (or the caller's cancellation).
    Cancelled,
}

impl TaskState {
    /// The wire name (`working`, `input_required`, …), also the stored one.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Reads a stored state; an unknown one means corrupt storage.
    pub fn parse(stored: &str) -> Result<Self, StoreError> {
        Ok(match stored {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => {
                return Err(StoreError::Unavailable(
                    "corrupt tasks row: state".to_owned(),
                ));
            }
        })
    }

    /// `completed`, `failed` or `cancelled`: it never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task to record.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    /// Chosen by the caller (random, unguessable); unique.
    pub id: &'a str,
    /// The account that made the call; only it sees the task.
    pub owner: &'a AccountId,
    /// The tool called.
    pub tool: &'a str,
    /// The process running it.
    pub runner: &'a str,
    /// How long the task (and its outcome) is kept from its creation.
    pub ttl: Duration,
    /// At most this many of `owner`'s tasks may be unended at once (this one included).
    pub max_unended: u32,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Its id.
    pub id: String,
    /// Its owner.
    pub owner: AccountId,
    /// The tool called.
    pub tool: String,
    /// Where it stands.
    pub state: TaskState,
    /// The latest word on it for people (progress, why it failed).
    pub status_message: Option<String>,
    /// Pending input requests while `input_required` (a JSON object, keys to requests).
    pub input_requests: Option<String>,
    /// Once ended: the tool's result or the JSON-RPC error, as JSON text.
    pub outcome: Option<String>,
    /// When it was created (store clock, Unix ms).
    pub created_ms: i64,
    /// When its state, message or input requests last changed (Unix ms).
    pub updated_ms: i64,
    /// How long it is kept from `created_ms`, in ms.
    pub ttl_ms: i64,
    /// The process running it.
    pub runner: String,
}

/// What [`TaskStore::cancel_task`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskCancel {
    /// No such task of this owner (or it expired).
    NotFound,
    /// It was running and is now `cancelled`; the record as it is now.
    Cancelled(TaskRecord),
    /// It had already ended; the record, unchanged.
    AlreadyEnded(TaskRecord),
}

/// MCP tasks shared by the front ends of one database.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Records a new `working` task, created and updated now. `Err(Conflict("task id"))`: the id
    /// is taken; `Err(Conflict("too many tasks"))`: `owner` already has `max_unended` unended
    /// tasks (counted exactly, also under concurrent creates from several front ends).
    async fn create_task(&self, task: &NewTask<'_>) -> Result<TaskRecord, StoreError>;

    /// Task `id` if it is `owner`'s and within its ttl; `None` otherwise (another account's task
    /// looks exactly like a missing one).
    async fn task(&self, id: &str, owner: &AccountId) -> Result<Option<TaskRecord>, StoreError>;

    /// `owner`'s tasks within their ttl, newest first (by `created_ms`, then `id` descending),
    /// after `after` (the `(created_ms, id)` of the last one of the previous page), at most
    /// `limit`.
    async fn tasks_of(
        &self,
        owner: &AccountId,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, StoreError>;

    /// Moves an unended task to `state` (`Working` or `InputRequired`) with `message` and
    /// `input_requests` (both replace what was there; `None` clears), `updated_ms` now. `false`
    /// when the task has ended (or is gone): nothing changed.
    async fn update_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        input_requests: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// Ends an unended task as `state` (terminal) with `message` and `outcome`, clearing its
    /// input requests. `false` when it had already ended (e.g. cancelled meanwhile): the first
    /// end stays.
    async fn end_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        outcome: &str,
    ) -> Result<bool, StoreError>;

    /// Cancels `owner`'s task `id` if it has not ended: state `cancelled`, `message`, no outcome.
    async fn cancel_task(
        &self,
        id: &str,
        owner: &AccountId,
        message: &str,
    ) -> Result<TaskCancel, StoreError>;

    /// Records that `runner` is alive, for all its unended tasks at once; returns how many.
    async fn beat_tasks(&self, runner: &str) -> Result<u64, StoreError>;

    /// Ends as `failed` (with `message` and `outcome`) every unended task whose runner has not
    /// beaten for `silent` (or was never heard of since its create, for as long); returns how
    /// many. `Duration::ZERO` fails every unended task not of `spare_runner`.
    async fn fail_lost_tasks(
        &self,
        silent: Duration,
        spare_runner: &str,
        message: &str,
        outcome: &str,
    ) -> Result<u64, StoreError>;

    /// Deletes every task past its ttl; returns how many.
    async fn purge_tasks(&self) -> Result<u64, StoreError>;
}

/// The longest ttl stored (about 100 years): a longer one is cut to it, so that a creation time
/// plus the ttl always fits the 64-bit time columns.
const MAX_TASK_TTL_MS: i64 = 100 * 366 * 24 * 3_600_000;

/// `ttl` in milliseconds as the tasks' `ttl_ms` column holds it.
pub fn task_ttl_millis(ttl: Duration) -> i64 {
    crate::duration_millis(ttl).min(MAX_TASK_TTL_MS)
}

/// A tasks row as both backends select it: id, account_id, tool, state, status_message,
/// input_requests, outcome, created_ms, updated_ms, ttl_ms, runner.
pub type TaskColumns = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    i64,
    i64,
    String,
);

/// Rebuilds a task from its stored columns; an unknown state means corrupt storage.
pub fn task_from_columns(columns: TaskColumns) -> Result<TaskRecord, StoreError> {
    let (
        id,
        owner,
        tool,
        state,
        status_message,
        input_requests,
        outcome,
        created,
        updated,
        ttl,
        runner,
    ) = columns;
    Ok(TaskRecord {
        id,
        owner: AccountId::from_stored(owner),
        tool,
        state: TaskState::parse(&state)?,
        status_message,
        input_requests,
        outcome,
        created_ms: created,
        updated_ms: updated,
        ttl_ms: ttl,
        runner,
    })
}

/// `state` if `update_task` may set it (`working`, `input_required`); asking it to end a task is
/// the caller's mistake, refused before any write.
pub fn running_task_state(state: TaskState) -> Result<TaskState, StoreError> {
    if state.is_terminal() {
        return Err(StoreError::Unavailable(format!(
            "update_task moves a task to working or input_required, not {}",
            state.as_str()
        )));
    }
    Ok(state)
}

/// `state` if `end_task` may end a task so (`completed`, `failed`, `cancelled`); a running state
/// is the caller's mistake, refused before any write.
pub fn ended_task_state(state: TaskState) -> Result<TaskState, StoreError> {
    if !state.is_terminal() {
        return Err(StoreError::Unavailable(format!(
            "end_task ends a task as completed, failed or cancelled, not {}",
            state.as_str()
        )));
    }
    Ok(state)
}
