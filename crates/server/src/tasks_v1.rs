//! 2025-11-25's experimental tasks, answered in front of rmcp (which knows only the 2026-07-28
//! extension): a `tools/call` with `task: {ttl}` answers `{task}` at once and runs on;
//! `tasks/get`, `tasks/result` (waits for the end, then answers exactly what the call would
//! have), `tasks/list` (the caller's tasks, newest first) and `tasks/cancel` (-32602 for a task
//! that had ended). Every task is the caller's account's: another account's looks missing.
//! `initialize` answers gain the `tasks` capability here.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use http_body_util::BodyExt;
use rmcp::ErrorData as McpError;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolgate_app::tasks::{TaskCancel, TaskState};
use toolgate_domain::Account;

use crate::Shared;
use crate::answer::{RESULT_CHARS_KEY, TaskSupport, result_chars};
use crate::error::{RpcCode, mcp_error, no_such_task, task_error};
use crate::jsonrpc::MessageInfo;
use crate::task_calls::{self, Became};
use crate::task_wire;

/// Tasks per `tasks/list` page.
const PAGE: u32 = 50;

#[derive(Deserialize)]
struct Envelope<P> {
    params: P,
}

#[derive(Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default)]
    task: Option<TaskAsk>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct TaskAsk {
    /// The keep the client asks for, in ms.
    #[serde(default)]
    ttl: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskIdParams {
    task_id: String,
}

#[derive(Deserialize, Default)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

/// The answer when `body` is a 2025-11-25 task request (a `tools/call` asking for a task, or a
/// `tasks/*` method); `None` leaves it to the usual path.
pub async fn claims(
    state: &Shared,
    account: &Arc<Account>,
    body: &[u8],
    info: &MessageInfo,
) -> Option<Response> {
    if info.per_request_version {
        return None;
    }
    let id = info.id.as_ref()?;
    let answer = match info.method.as_deref()? {
        "tools/call" if info.asks_task => call(state, account, body).await?,
        "tasks/get" => match params::<TaskIdParams>(body) {
            Ok(p) => get(state, account, &p.task_id).await,
            Err(e) => Err(e),
        },
        "tasks/result" => match params::<TaskIdParams>(body) {
            Ok(p) => result(state, account, &p.task_id).await,
            Err(e) => Err(e),
        },
        "tasks/cancel" => match params::<TaskIdParams>(body) {
            Ok(p) => cancel(state, account, &p.task_id).await,
            Err(e) => Err(e),
        },
        "tasks/list" => list(state, account, body).await,
        _ => return None,
    };
    Some(respond(id, answer))
}

fn params<P: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<P, McpError> {
    serde_json::from_slice::<Envelope<P>>(body)
        .map(|envelope| envelope.params)
        .map_err(|_| {
            mcp_error(
                RpcCode::InvalidParams,
                "Invalid params: tasks/get, tasks/result and tasks/cancel take {\"taskId\": string}",
            )
        })
}

fn poll_ms(state: &Shared) -> u64 {
    state.app.tasks().poll_interval_ms()
}

/// A `tools/call` that asks for a task (`MessageInfo::asks_task`, read by the body's one parse).
async fn call(
    state: &Shared,
    account: &Arc<Account>,
    body: &[u8],
) -> Option<Result<Value, McpError>> {
    let call = serde_json::from_slice::<Envelope<CallParams>>(body)
        .ok()?
        .params;
    let ask = call.task?;
    let support = state.handler.task_support(&call.name);
    if support == TaskSupport::Forbidden {
        return Some(Err(mcp_error(
            RpcCode::MethodNotFound,
            format!(
                "`{}` does not run as a task (its execution.taskSupport is forbidden); call it without `task`",
                shown(&call.name)
            ),
        )));
    }
    let tasks = state.app.tasks().clone();
    let asked = ask
        .ttl
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        .map(|ms| Duration::from_millis(ms.min(1e15) as u64));
    let ttl = tasks.ttl_for(asked);
    let became = task_calls::on_request(
        state.handler.answerer(),
        &tasks,
        account.clone(),
        call.name,
        call.arguments,
        result_chars(
            call.meta
                .as_ref()
                .and_then(|meta| meta.get(RESULT_CHARS_KEY)),
        ),
        ttl,
    )
    .await;
    Some(match became {
        Ok(Became::Task(task)) => Ok(json!({ "task": task_wire::v1_task(&task, poll_ms(state)) })),
        Ok(Became::Answered(Err(refused))) => Err(refused),
        Ok(Became::Answered(Ok(answered))) => {
            serde_json::to_value(answered.into_rmcp()).map_err(|_| lost())
        }
        Err(error) => Err(task_error(&error)),
    })
}

fn shown(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

fn lost() -> McpError {
    mcp_error(
        RpcCode::InternalError,
        "the task's outcome could not be read back",
    )
}

async fn get(state: &Shared, account: &Account, id: &str) -> Result<Value, McpError> {
    match state.app.tasks().get(&account.id, id).await {
        Ok(Some(task)) => Ok(task_wire::v1_task(&task, poll_ms(state))),
        Ok(None) => Err(no_such_task()),
        Err(error) => Err(task_error(&error)),
    }
}

/// `tasks/result`: waits for the end, then answers what the call answered (its result with
/// `related-task`, or its JSON-RPC error).
async fn result(state: &Shared, account: &Account, id: &str) -> Result<Value, McpError> {
    let tasks = state.app.tasks();
    let wait = tasks.settings().result_wait;
    let task = match tasks.wait_ended(&account.id, id, wait).await {
        Ok(Some(task)) => task,
        Ok(None) => return Err(no_such_task()),
        Err(error) => return Err(task_error(&error)),
    };
    let outcome = || -> Result<Map<String, Value>, McpError> {
        match serde_json::from_str(task.outcome.as_deref().unwrap_or_default()) {
            Ok(Value::Object(object)) => Ok(object),
            _ => Err(lost()),
        }
    };
    match task.state {
        TaskState::Completed => {
            let mut result = outcome()?;
            result.insert(
                "_meta".to_owned(),
                json!({ "io.modelcontextprotocol/related-task": { "taskId": task.id } }),
            );
            Ok(Value::Object(result))
        }
        TaskState::Failed => {
            let error = outcome()?;
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the task failed")
                .to_owned();
            Err(McpError::new(
                rmcp::model::ErrorCode(i32::try_from(code).unwrap_or(-32603)),
                message,
                error.get("data").cloned(),
            ))
        }
        TaskState::Cancelled => Err(mcp_error(
            RpcCode::InternalError,
            "the task was cancelled before it ended; it has no result",
        )),
        TaskState::Working | TaskState::InputRequired => Err(mcp_error(
            RpcCode::InternalError,
            "the task has not ended yet; poll tasks/get and ask again",
        )),
    }
}

async fn cancel(state: &Shared, account: &Account, id: &str) -> Result<Value, McpError> {
    match state.app.tasks().cancel(&account.id, id).await {
        Ok(TaskCancel::Cancelled(task)) => Ok(task_wire::v1_task(&task, poll_ms(state))),
        Ok(TaskCancel::AlreadyEnded(task)) => Err(mcp_error(
            RpcCode::InvalidParams,
            format!(
                "Cannot cancel task: already in terminal status '{}'",
                task.state.as_str()
            ),
        )),
        Ok(TaskCancel::NotFound) => Err(no_such_task()),
        Err(error) => Err(task_error(&error)),
    }
}

/// `tasks/list`: the caller's tasks, newest first; the cursor is the last one's time and id.
async fn list(state: &Shared, account: &Account, body: &[u8]) -> Result<Value, McpError> {
    let bad_cursor = || mcp_error(RpcCode::InvalidParams, "Invalid params: unknown cursor");
    let cursor = serde_json::from_slice::<Envelope<ListParams>>(body)
        .map(|e| e.params.cursor)
        .unwrap_or_default();
    let after = match &cursor {
        None => None,
        Some(cursor) => {
            let (ms, id) = cursor.split_once('.').ok_or_else(bad_cursor)?;
            Some((ms.parse::<i64>().map_err(|_| bad_cursor())?, id))
        }
    };
    let page = state
        .app
        .tasks()
        .list(&account.id, after, PAGE)
        .await
        .map_err(|error| task_error(&error))?;
    let poll = poll_ms(state);
    let next = (page.len() == PAGE as usize)
        .then(|| page.last().map(|t| format!("{}.{}", t.created_ms, t.id)))
        .flatten();
    let mut answer =
        json!({ "tasks": page.iter().map(|t| task_wire::v1_task(t, poll)).collect::<Vec<_>>() });
    if let (Some(next), Some(object)) = (next, answer.as_object_mut()) {
        object.insert("nextCursor".to_owned(), Value::String(next));
    }
    Ok(answer)
}

fn respond(id: &Value, answer: Result<Value, McpError>) -> Response {
    let body = match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
    };
    let mut response = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An `initialize` answer (inline JSON) with 2025-11-25's `tasks` capability added; anything
/// else unchanged.
pub async fn with_tasks_capability(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !response.status().is_success() || !is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match http_body_util::Limited::new(body, 256 * 1024)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let patched = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|mut message| {
            let capabilities = message
                .get_mut("result")?
                .get_mut("capabilities")?
                .as_object_mut()?;
            capabilities.insert(
                "tasks".to_owned(),
                json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } }),
            );
            serde_json::to_vec(&message).ok()
        });
    let body = patched.map_or(bytes, Bytes::from);
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}
