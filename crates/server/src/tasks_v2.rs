//! The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`), through rmcp, which checks
//! the request's `_meta` and headers and gates `tasks/*` on the client's declared extension
//! (-32021 otherwise): a call of a tool that may run long, from a client that declared the
//! extension, becomes a task when it outlasts `task_after_s`; `tasks/get` inlines the result or
//! error once it ended; `tasks/update` hands input to a task waiting for it; `tasks/cancel` is
//! an empty acknowledgement, also for a task that had ended.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams, GetTaskResult,
    UpdateTaskParams,
};
use serde_json::{Map, Value};
use toolgate_app::tasks::TaskCancel;
use toolgate_domain::Account;

use crate::answer::Answerer;
use crate::error::{no_such_task, task_error};
use crate::task_calls::{self, Became};
use crate::task_wire;

/// The poll interval clients are asked to keep, in ms.
fn poll_ms(answerer: &Answerer) -> u64 {
    answerer.app().tasks().poll_interval_ms()
}

/// A call from a client that declared the extension, of a tool that may run long; `request` is
/// cancelled when the client goes away.
pub(crate) async fn call(
    answerer: &Answerer,
    caller: Arc<Account>,
    name: String,
    arguments: Option<Map<String, Value>>,
    result_chars: Option<usize>,
    request: tokio_util::sync::CancellationToken,
) -> Result<CallToolResponse, McpError> {
    let tasks = answerer.app().tasks().clone();
    let became = task_calls::server_directed(
        answerer,
        &tasks,
        caller,
        name,
        arguments,
        result_chars,
        request,
    )
    .await;
    match became {
        Became::Answered(answer) => answer.map(|answered| answered.into_rmcp().into()),
        Became::Task(task) => Ok(CallToolResponse::Task(CreateTaskResult::new(
            task_wire::v2_task(&task, poll_ms(answerer)),
        ))),
    }
}

/// `tasks/get`.
pub(crate) async fn get(
    answerer: &Answerer,
    caller: &Account,
    params: &GetTaskParams,
) -> Result<GetTaskResult, McpError> {
    match answerer
        .app()
        .tasks()
        .get(&caller.id, &params.task_id)
        .await
    {
        Ok(Some(task)) => Ok(GetTaskResult::new(task_wire::v2_detailed(
            &task,
            poll_ms(answerer),
        ))),
        Ok(None) => Err(no_such_task()),
        Err(error) => Err(task_error(&error)),
    }
}

/// `tasks/update`: input for a task waiting for it; answers it does not ask for are ignored.
pub(crate) async fn update(
    answerer: &Answerer,
    caller: &Account,
    params: UpdateTaskParams,
) -> Result<(), McpError> {
    let tasks = answerer.app().tasks();
    match tasks.get(&caller.id, &params.task_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return Err(no_such_task()),
        Err(error) => return Err(task_error(&error)),
    }
    let responses: Map<String, Value> = params.input_responses.into_iter().collect();
    tasks
        .deliver_input(&caller.id, &params.task_id, responses)
        .await
        .map(|_| ())
        .map_err(|error| task_error(&error))
}

/// `tasks/cancel`: the same empty acknowledgement whether it was running or had ended.
pub(crate) async fn cancel(
    answerer: &Answerer,
    caller: &Account,
    params: &CancelTaskParams,
) -> Result<(), McpError> {
    match answerer
        .app()
        .tasks()
        .cancel(&caller.id, &params.task_id)
        .await
    {
        Ok(TaskCancel::NotFound) => Err(no_such_task()),
        Ok(TaskCancel::Cancelled(_) | TaskCancel::AlreadyEnded(_)) => Ok(()),
        Err(error) => Err(task_error(&error)),
    }
}
