//! A `tools/call` that may become an MCP task, for either wire generation: the call runs in a
//! tokio task of its own whose cancellation belongs to the task (never to the request, which
//! ends when the task handle is answered), and its answer becomes the task's end.
//!
//! - 2025-11-25 (the client asks, `task: {ttl}`): the task is recorded first (the account's cap
//!   on running tasks is checked before anything is charged), the call starts, and the handle
//!   is answered once the call is admitted, so a call refused for funds is a JSON-RPC error, as
//!   without a task, and a task is metered once, by the call it wraps.
//! - 2026-07-28 (the server decides): the call starts as a plain one; if it has not ended after
//!   `task_after_s`, it is recorded as a task and the handle is answered.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolgate_app::CallIo;
use toolgate_app::tasks::{LatestProgress, TaskEnd, TaskError, Tasks};
use toolgate_app::tasks::{TaskRecord, TaskState};
use toolgate_domain::Account;

use crate::answer::{Answered, Answerer};

/// A call running in a tokio task of its own, as a task's work or on its way to becoming one.
pub(crate) struct TaskCall {
    cancel: CancellationToken,
    /// Cancels the call if its request goes away before it became a task: dropped with the
    /// request's future (our front door), or when the request's own token is cancelled (rmcp).
    unclaimed: Option<tokio_util::sync::DropGuard>,
    /// Cancelled once the call is a task's or this is dropped: the watch on the request ends.
    claimed: tokio_util::sync::DropGuard,
    progress: Arc<LatestProgress>,
    admitted: Arc<Notify>,
    handle: JoinHandle<Result<Answered, McpError>>,
}

/// How a call that could become a task went.
pub(crate) enum Became {
    /// It ended in time: the answer, as for a plain call.
    Answered(Result<Answered, McpError>),
    /// It runs on as this task.
    Task(TaskRecord),
}

impl TaskCall {
    /// Starts `name` for `caller` with `arguments`, with task time limits; `request`, when
    /// given, cancels the call if it is cancelled before the call became a task.
    pub(crate) fn start(
        answerer: &Answerer,
        caller: Arc<Account>,
        name: String,
        arguments: Option<Map<String, Value>>,
        result_chars: Option<usize>,
        request: Option<CancellationToken>,
    ) -> Self {
        let (cancel, progress, admitted) = (
            CancellationToken::new(),
            Arc::new(LatestProgress::default()),
            Arc::new(Notify::new()),
        );
        let answerer = answerer.clone();
        let (token, sink, told) = (cancel.clone(), progress.clone(), admitted.clone());
        let handle = tokio::spawn(async move {
            let io = CallIo {
                progress: Some(&*sink),
                cancel: Some(&token),
                admitted: Some(&told),
                as_task: true,
                result_chars,
                client: None,
                session: None,
            };
            answerer
                .answer(&caller, &name, arguments, io, std::time::Instant::now())
                .await
        });
        let claimed = CancellationToken::new();
        if let Some(request) = request {
            let (call, claimed) = (cancel.clone(), claimed.clone());
            tokio::spawn(async move {
                // rmcp cancels the request's token also once it has answered: a call already
                // claimed by its task must not take that for its client's going
                tokio::select! {
                    biased;
                    () = claimed.cancelled() => {}
                    () = request.cancelled() => {
                        if !claimed.is_cancelled() {
                            call.cancel();
                        }
                    }
                }
            });
        }
        Self {
            unclaimed: Some(cancel.clone().drop_guard()),
            claimed: claimed.drop_guard(),
            cancel,
            progress,
            admitted,
            handle,
        }
    }

    /// Waits until the call is admitted (`None`) or ends first (its answer).
    async fn admitted_or_ended(&mut self) -> Option<Result<Answered, McpError>> {
        tokio::select! {
            () = self.admitted.notified() => None,
            joined = &mut self.handle => Some(joined_answer(joined)),
        }
    }

    /// Waits up to `after` for the call to end.
    async fn ended_within(&mut self, after: Duration) -> Option<Result<Answered, McpError>> {
        tokio::time::timeout(after, &mut self.handle)
            .await
            .ok()
            .map(joined_answer)
    }

    /// Hands the call to `tasks` as the work of `task`: from here on only the task's cancel
    /// stops it.
    fn adopt(mut self, tasks: &Arc<Tasks>, task: &TaskRecord) {
        if let Some(guard) = self.unclaimed.take() {
            guard.disarm();
        }
        drop(self.claimed);
        let handle = self.handle;
        tasks.run(task, self.cancel, Some(self.progress), None, async move {
            task_end(joined_answer(handle.await))
        });
    }
}

/// The 2025-11-25 way: the task recorded, the call started, the handle answered once the call
/// was admitted. A call refused before admission is answered as such, its task ended failed.
pub(crate) async fn on_request(
    answerer: &Answerer,
    tasks: &Arc<Tasks>,
    caller: Arc<Account>,
    name: String,
    arguments: Option<Map<String, Value>>,
    result_chars: Option<usize>,
    ttl: Duration,
) -> Result<Became, TaskError> {
    let task = tasks.create(&caller.id, &name, ttl).await?;
    let mut call = TaskCall::start(answerer, caller, name, arguments, result_chars, None);
    if let Some(Err(refused)) = call.admitted_or_ended().await {
        let end = task_end(Err(refused.clone()));
        let _ = tasks
            .set_ended(&task.id, end.state, end.message.as_deref(), &end.outcome)
            .await;
        return Ok(Became::Answered(Err(refused)));
    }
    call.adopt(tasks, &task);
    Ok(Became::Task(task))
}

/// The 2026-07-28 way: the call answered as a plain one if it ends within `task_after_s`, else
/// recorded as a task. An account at its cap of running tasks waits for its call instead.
pub(crate) async fn server_directed(
    answerer: &Answerer,
    tasks: &Arc<Tasks>,
    caller: Arc<Account>,
    name: String,
    arguments: Option<Map<String, Value>>,
    result_chars: Option<usize>,
    request: CancellationToken,
) -> Became {
    let owner = caller.id.clone();
    let mut call = TaskCall::start(
        answerer,
        caller,
        name.clone(),
        arguments,
        result_chars,
        Some(request),
    );
    if let Some(answer) = call.ended_within(tasks.settings().after).await {
        return Became::Answered(answer);
    }
    match tasks.create(&owner, &name, tasks.ttl_for(None)).await {
        Ok(task) => {
            call.adopt(tasks, &task);
            Became::Task(task)
        }
        Err(error) => {
            tracing::warn!(%error, "a long call stays a plain call: no task could be made");
            Became::Answered(joined_answer(call.handle.await))
        }
    }
}

fn joined_answer(
    joined: Result<Result<Answered, McpError>, tokio::task::JoinError>,
) -> Result<Answered, McpError> {
    joined.unwrap_or_else(|_| {
        Err(McpError::internal_error(
            "the call failed inside the service; nothing more is known",
            None,
        ))
    })
}

/// A call's answer as a task's end: a result (a tool's error result too) completes it, a
/// JSON-RPC error fails it.
pub(crate) fn task_end(answer: Result<Answered, McpError>) -> TaskEnd {
    match answer {
        Ok(answered) => TaskEnd {
            state: TaskState::Completed,
            message: None,
            outcome: serde_json::to_string(&answered.into_rmcp()).unwrap_or_else(|_| {
                r#"{"content":[{"type":"text","text":"the result could not be kept"}],"isError":true}"#
                    .to_owned()
            }),
        },
        Err(error) => TaskEnd {
            state: TaskState::Failed,
            message: Some(error.message.to_string()),
            outcome: serde_json::to_string(&error).unwrap_or_else(|_| {
                r#"{"code":-32603,"message":"the call failed"}"#.to_owned()
            }),
        },
    }
}
