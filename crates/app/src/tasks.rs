//! MCP tasks: a call that runs on after its request was answered, whatever the wire generation
//! that asked for it. The store holds each task (so any front end on one database answers for
//! it); this process runs the ones it created, beats for them so that others can tell it is
//! alive, ends them in the store, and fails the tasks of processes that stopped beating.
//!
//! The work of a task is a future the caller started (a tool call already admitted and charged:
//! a task is metered once, by the call it wraps); this only keeps it running, its progress as
//! the task's status message, its cancellation, and its end.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolgate_domain::AccountId;
use toolgate_store::{NewTask, Store, StoreError};
/// A task as stored, where it stands, and what a cancel found: the store's own types.
pub use toolgate_store::{TaskCancel, TaskRecord, TaskState};

use crate::capability::ProgressSink;

/// How tasks are kept, from the operator's settings.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// How long a task and its result are kept from its creation, at most (and when the client
    /// asks for nothing).
    pub ttl: Duration,
    /// The shortest keep a client may ask for (shorter asks are raised to it).
    pub min_ttl: Duration,
    /// How many of one account's tasks may run at once.
    pub max_unended: u32,
    /// How often clients are asked to poll.
    pub poll_interval: Duration,
    /// A call of a client that accepts tasks and has not ended after this becomes a task
    /// (the 2026-07-28 extension, where the server decides).
    pub after: Duration,
    /// How long `tasks/result` (2025-11-25) waits for a task to end: its longest run and a
    /// margin.
    pub result_wait: Duration,
    /// This process is the only one on its store (SQLite): at start, every task left running
    /// is failed at once rather than after [`LOST_AFTER`].
    pub sole_process: bool,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3600),
            min_ttl: Duration::from_secs(60),
            max_unended: 16,
            poll_interval: Duration::from_secs(1),
            after: Duration::from_secs(10),
            result_wait: Duration::from_secs(3600 + 60),
            sole_process: true,
        }
    }
}

/// How often this process tells the store it still runs its tasks.
const BEAT: Duration = Duration::from_secs(5);
/// A task whose process has not beaten for this long is failed.
pub const LOST_AFTER: Duration = Duration::from_secs(30);
/// How often a running task's progress is written, and a cancel made elsewhere looked for.
const WATCH: Duration = Duration::from_secs(1);
/// How often expired tasks are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// The outcome written for a task whose process stopped.
pub const LOST_OUTCOME: &str = r#"{"code":-32603,"message":"the server running this task stopped before it ended; its work may have been cut short"}"#;
const LOST_MESSAGE: &str = "the server running this task stopped before it ended";
/// The outcome written for a task whose server was stopped in order.
const STOPPED_OUTCOME: &str = r#"{"code":-32603,"message":"the server running this task was stopped (a restart or an upgrade) before it ended; run it again"}"#;
const STOPPED_MESSAGE: &str = "the server running this task was stopped before it ended";

/// Why a task could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The account already runs as many tasks as it may.
    #[error(
        "this account already runs {0} tasks, the most it may at once; wait for one to end or cancel one"
    )]
    TooMany(u32),
    /// The store failed; the detail is for logs only.
    #[error("the task records could not be reached")]
    Store(#[source] StoreError),
}

impl From<StoreError> for TaskError {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

/// How a task's work ended: its state, a word for people, and the outcome as JSON text (the
/// tool's result, or a JSON-RPC error object).
#[derive(Debug, Clone)]
pub struct TaskEnd {
    /// `Completed`, `Failed` or `Cancelled`.
    pub state: TaskState,
    /// Why, for people (a failure's message).
    pub message: Option<String>,
    /// The result or the error, as JSON text.
    pub outcome: String,
}

/// Input the client sent a task waiting for it (`tasks/update`), with the means to say when the
/// task took it.
pub struct InputDelivery {
    /// Answers by request key, as the client sent them.
    pub responses: serde_json::Map<String, serde_json::Value>,
    /// Told once the task's state reflects them.
    pub taken: oneshot::Sender<()>,
}

/// What this process holds of a task it runs.
struct Running {
    cancel: CancellationToken,
    ended: Arc<Notify>,
    input: Option<mpsc::Sender<InputDelivery>>,
}

/// The latest progress of a task's call, kept for its status message.
#[derive(Default)]
pub struct LatestProgress {
    message: Mutex<Option<String>>,
}

impl LatestProgress {
    fn take(&self) -> Option<String> {
        self.message.lock().ok().and_then(|mut m| m.take())
    }
}

impl ProgressSink for LatestProgress {
    fn report(&self, progress: f64, message: &str) {
        let text = if message.is_empty() {
            format!("{progress}")
        } else {
            message.chars().take(512).collect()
        };
        if let Ok(mut slot) = self.message.lock() {
            *slot = Some(text);
        }
    }
}

/// The tasks of every account, as this process makes and runs them.
pub struct Tasks {
    store: Arc<dyn Store>,
    runner: String,
    settings: TaskSettings,
    running: Mutex<HashMap<String, Running>>,
}

impl Tasks {
    /// Tasks over `store`, run by this process under a fresh runner id.
    pub fn new(store: Arc<dyn Store>, settings: TaskSettings) -> Arc<Self> {
        Arc::new(Self {
            store,
            runner: format!("runner-{}", uuid::Uuid::new_v4()),
            settings,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// The store the tasks are kept in.
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The settings tasks follow.
    pub fn settings(&self) -> &TaskSettings {
        &self.settings
    }

    /// How often clients are asked to poll, in ms, as both wire generations write it.
    pub fn poll_interval_ms(&self) -> u64 {
        u64::try_from(self.settings.poll_interval.as_millis()).unwrap_or(u64::MAX)
    }

    /// The keep of a task whose client asked for `asked` (none: the longest).
    pub fn ttl_for(&self, asked: Option<Duration>) -> Duration {
        asked.map_or(self.settings.ttl, |asked| {
            asked.clamp(self.settings.min_ttl, self.settings.ttl)
        })
    }

    /// Records a new task of `owner` calling `tool`, kept for `ttl`; nothing runs it yet
    /// ([`Tasks::run`] does, at once).
    pub async fn create(
        &self,
        owner: &AccountId,
        tool: &str,
        ttl: Duration,
    ) -> Result<TaskRecord, TaskError> {
        let id = uuid::Uuid::new_v4().to_string();
        let task = NewTask {
            id: &id,
            owner,
            tool,
            runner: &self.runner,
            ttl,
            max_unended: self.settings.max_unended,
        };
        match self.store.create_task(&task).await {
            Ok(record) => Ok(record),
            Err(StoreError::Conflict("too many tasks")) => {
                Err(TaskError::TooMany(self.settings.max_unended))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Runs `work` as task `task` (just created by [`Tasks::create`]): its progress written as
    /// the status message, `cancel` cancelled by `tasks/cancel` (here or, within a second, on
    /// another front end), its end written unless the task ended first (a cancel wins).
    /// `input`, for work that asks the client for input, receives `tasks/update`s.
    pub fn run<W>(
        self: &Arc<Self>,
        task: &TaskRecord,
        cancel: CancellationToken,
        progress: Option<Arc<LatestProgress>>,
        input: Option<mpsc::Sender<InputDelivery>>,
        work: W,
    ) where
        W: Future<Output = TaskEnd> + Send + 'static,
    {
        let ended = Arc::new(Notify::new());
        if let Ok(mut running) = self.running.lock() {
            running.insert(
                task.id.clone(),
                Running {
                    cancel: cancel.clone(),
                    ended: ended.clone(),
                    input,
                },
            );
        }
        let (tasks, id, owner) = (self.clone(), task.id.clone(), task.owner.clone());
        tokio::spawn(async move {
            let end = tasks
                .watch(&id, &owner, &cancel, progress.as_deref(), work)
                .await;
            if let Some(end) = end {
                let written = tasks
                    .store
                    .end_task(&id, end.state, end.message.as_deref(), &end.outcome)
                    .await;
                if let Err(error) = written {
                    tracing::warn!(%error, "a task's end was not stored; it fails when its runner is found lost");
                }
            }
            if let Ok(mut running) = tasks.running.lock() {
                running.remove(&id);
            }
            ended.notify_waiters();
        });
    }

    /// Drives `work` to its end, writing progress and looking for a cancel made elsewhere each
    /// [`WATCH`]; `None` when the task was cancelled (its state already says so).
    async fn watch<W>(
        &self,
        id: &str,
        owner: &AccountId,
        cancel: &CancellationToken,
        progress: Option<&LatestProgress>,
        work: W,
    ) -> Option<TaskEnd>
    where
        W: Future<Output = TaskEnd> + Send,
    {
        tokio::pin!(work);
        let mut tick = tokio::time::interval(WATCH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                end = &mut work => return Some(end),
                _ = tick.tick() => {}
            }
            if let Some(message) = progress.and_then(LatestProgress::take) {
                let _ = self
                    .store
                    .update_task(id, TaskState::Working, Some(&message), None)
                    .await;
            }
            match self.store.task(id, owner).await {
                Ok(Some(record)) if record.state.is_terminal() => {
                    // cancelled elsewhere: the work is told, and given a moment to stop
                    cancel.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(10), &mut work).await;
                    return None;
                }
                Ok(None) => {
                    cancel.cancel();
                    return None;
                }
                _ => {}
            }
        }
    }

    /// `owner`'s task `id`, if it has it and it has not expired.
    pub async fn get(&self, owner: &AccountId, id: &str) -> Result<Option<TaskRecord>, TaskError> {
        Ok(self.store.task(id, owner).await?)
    }

    /// `owner`'s tasks, newest first, a page of `limit` after `after`.
    pub async fn list(
        &self,
        owner: &AccountId,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, TaskError> {
        Ok(self.store.tasks_of(owner, after, limit).await?)
    }

    /// Cancels `owner`'s task `id`: recorded at once; its work, when it runs here, is told now,
    /// and on another front end within [`WATCH`].
    pub async fn cancel(&self, owner: &AccountId, id: &str) -> Result<TaskCancel, TaskError> {
        let cancelled = self
            .store
            .cancel_task(id, owner, "the task was cancelled by request")
            .await?;
        if matches!(cancelled, TaskCancel::Cancelled(_))
            && let Ok(running) = self.running.lock()
            && let Some(task) = running.get(id)
        {
            task.cancel.cancel();
        }
        Ok(cancelled)
    }

    /// Waits until `owner`'s task `id` has ended (or `limit` passed, or it is gone), and returns
    /// it as it is then.
    pub async fn wait_ended(
        &self,
        owner: &AccountId,
        id: &str,
        limit: Duration,
    ) -> Result<Option<TaskRecord>, TaskError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self
                .running
                .lock()
                .ok()
                .and_then(|running| running.get(id).map(|task| task.ended.clone()));
            // registered before the read, so an end between the two is not missed
            let notified = ended.as_ref().map(|ended| ended.notified());
            let record = self.get(owner, id).await?;
            match record {
                Some(task) if !task.state.is_terminal() => {}
                other => return Ok(other),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return self.get(owner, id).await;
            }
            let pause = (deadline - now).min(Duration::from_millis(250));
            match notified {
                Some(notified) => {
                    let _ = tokio::time::timeout(pause, notified).await;
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Hands `responses` to `owner`'s task `id` when it runs here and waits for input; `false`
    /// when it does not (unknown here, or it asks for none).
    pub async fn deliver_input(
        &self,
        owner: &AccountId,
        id: &str,
        responses: serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, TaskError> {
        if self.get(owner, id).await?.is_none() {
            return Ok(false);
        }
        let sender = self
            .running
            .lock()
            .ok()
            .and_then(|running| running.get(id).and_then(|task| task.input.clone()));
        let Some(sender) = sender else {
            return Ok(false);
        };
        let (taken, told) = oneshot::channel();
        if sender
            .send(InputDelivery { responses, taken })
            .await
            .is_err()
        {
            return Ok(false);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), told).await;
        Ok(true)
    }

    /// Ends task `id` as `state` with `message` and `outcome`, unless it ended first.
    pub async fn set_ended(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        outcome: &str,
    ) -> Result<bool, TaskError> {
        Ok(self.store.end_task(id, state, message, outcome).await?)
    }

    /// Records a running task's state and input requests (work that asks the client for input).
    pub async fn set_state(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        input_requests: Option<&str>,
    ) -> Result<bool, TaskError> {
        Ok(self
            .store
            .update_task(id, state, message, input_requests)
            .await?)
    }

    /// Starts this process's upkeep: its beat, failing the tasks of processes that stopped
    /// beating (at once, when it is the only process, those any earlier run left), and
    /// deleting expired tasks. Ends when `stop` is cancelled.
    pub fn start_upkeep(self: &Arc<Self>, stop: CancellationToken) {
        let tasks = self.clone();
        tokio::spawn(async move {
            if tasks.settings.sole_process {
                tasks.fail_lost(Duration::ZERO).await;
            }
            let mut beat = tokio::time::interval(BEAT);
            let mut since_purge = Duration::ZERO;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = beat.tick() => {}
                }
                if let Err(error) = tasks.store.beat_tasks(&tasks.runner).await {
                    tracing::warn!(%error, "this process's tasks could not be marked alive");
                }
                tasks.fail_lost(LOST_AFTER).await;
                since_purge += BEAT;
                if since_purge >= PURGE_EVERY {
                    since_purge = Duration::ZERO;
                    if let Err(error) = tasks.store.purge_tasks().await {
                        tracing::warn!(%error, "expired tasks were not deleted");
                    }
                }
            }
        });
    }

    /// Ends every task this process runs as `failed` (the server is stopping): their code is
    /// cancelled, and their clients learn at once why rather than after [`LOST_AFTER`].
    pub async fn stop_running(&self) {
        let running: Vec<(String, CancellationToken)> = self
            .running
            .lock()
            .map(|running| {
                running
                    .iter()
                    .map(|(id, task)| (id.clone(), task.cancel.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (id, cancel) in running {
            let ended = self
                .store
                .end_task(
                    &id,
                    TaskState::Failed,
                    Some(STOPPED_MESSAGE),
                    STOPPED_OUTCOME,
                )
                .await;
            if let Err(error) = ended {
                tracing::warn!(%error, "a task of a stopping server was not failed; it will be once found lost");
            }
            cancel.cancel();
        }
    }

    async fn fail_lost(&self, silent: Duration) {
        match self
            .store
            .fail_lost_tasks(silent, &self.runner, LOST_MESSAGE, LOST_OUTCOME)
            .await
        {
            Ok(0) => {}
            Ok(failed) => tracing::warn!(failed, "tasks of a stopped server were failed"),
            Err(error) => tracing::warn!(%error, "tasks of stopped servers could not be failed"),
        }
    }
}

#[cfg(test)]
#[path = "tasks_tests.rs"]
mod tests;
