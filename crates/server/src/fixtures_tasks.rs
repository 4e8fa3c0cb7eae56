//! The conformance suite's task fixtures (the `tasks-*` scenarios of the 2026-07-28
//! extension), compiled only with the `conformance-fixtures` feature. They run through the same
//! task records, runner and wire as the real tools' tasks; only their work is made up: a sleep,
//! a tool error, a protocol error, and waits for the client's input (`tasks/update`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    CreateTaskResult, InputRequiredResult, Tool,
};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_app::tasks::{InputDelivery, TaskEnd, TaskState, Tasks};
use toolgate_domain::Account;

use crate::answer::{Answerer, TaskSupport};
use crate::task_wire;

/// `(name, task support)` of each fixture.
const FIXTURES: [(&str, TaskSupport); 7] = [
    ("greet", TaskSupport::Forbidden),
    ("slow_compute", TaskSupport::Optional),
    ("failing_job", TaskSupport::Required),
    ("protocol_error_job", TaskSupport::Optional),
    ("confirm_delete", TaskSupport::Optional),
    ("multi_input", TaskSupport::Optional),
    ("test_tool_with_task", TaskSupport::Required),
];

/// The task fixtures, for `tools/list`.
pub fn tools() -> Vec<Tool> {
    let schema = match json!({"type": "object", "properties": {}}) {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(Map::new()),
    };
    FIXTURES
        .iter()
        .map(|(name, _)| {
            Tool::new(
                *name,
                format!("conformance task fixture `{name}`"),
                schema.clone(),
            )
        })
        .collect()
}

/// A fixture's task support, if `name` is one.
pub fn task_support(name: &str) -> Option<TaskSupport> {
    FIXTURES
        .iter()
        .find(|(fixture, _)| *fixture == name)
        .map(|(_, support)| *support)
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

fn elicit(message: &str, property: &str, kind: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { property: { "type": kind } },
                "required": [property],
            },
        },
    })
}

/// Runs the task fixture `request` names (`None`: it names none).
pub async fn call(
    answerer: &Answerer,
    caller: &Arc<Account>,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<Result<CallToolResponse, McpError>> {
    task_support(&request.name)?;
    let declared = context
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks());
    let args = request.arguments.clone().unwrap_or_default();
    let name = request.name.as_ref();
    if name == "greet" || (!declared && name == "slow_compute") {
        let who = args.get("name").and_then(Value::as_str).unwrap_or("World");
        let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
        if name == "slow_compute" {
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 60.0))).await;
            return Some(Ok(text("computed").into()));
        }
        return Some(Ok(text(format!("Hello, {who}!")).into()));
    }
    if !declared {
        return Some(Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        )));
    }
    if name == "test_tool_with_task" {
        let answered = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get("user_name").cloned());
        let Some(answer) = answered else {
            let round = json!({
                "resultType": "input_required",
                "inputRequests": { "user_name": elicit("What is your name?", "name", "string") },
                "requestState": "round-1",
            });
            return Some(
                serde_json::from_value::<InputRequiredResult>(round)
                    .map(CallToolResponse::InputRequired)
                    .map_err(|e| McpError::internal_error(e.to_string(), None)),
            );
        };
        let who = answer
            .pointer("/content/name")
            .and_then(Value::as_str)
            .unwrap_or("nobody")
            .to_owned();
        return Some(
            start(answerer, caller, name, false, move |_, _, _| async move {
                completed(&text(format!("Hello, {who}!")))
            })
            .await,
        );
    }
    let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
    Some(match name {
        "slow_compute" => {
            start(
                answerer,
                caller,
                name,
                false,
                move |_, cancel, _| async move {
                    let pause = Duration::from_secs_f64(seconds.clamp(0.0, 600.0));
                    tokio::select! {
                        () = tokio::time::sleep(pause) => completed(&text("computed")),
                        () = cancel.cancelled() => cancelled(),
                    }
                },
            )
            .await
        }
        "failing_job" => {
            start(answerer, caller, name, false, |_, _, _| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                completed(&CallToolResult::error(vec![ContentBlock::text(
                    "the job failed, as this fixture always does",
                )]))
            })
            .await
        }
        "protocol_error_job" => {
            start(answerer, caller, name, false, |_, _, _| async {
                TaskEnd {
                    state: TaskState::Failed,
                    message: Some("internal error".to_owned()),
                    outcome: json!({"code": -32603, "message": "the job broke inside the server"})
                        .to_string(),
                }
            })
            .await
        }
        "confirm_delete" => asking(answerer, caller, name, &["confirm"]).await,
        _ => asking(answerer, caller, name, &["first", "second"]).await,
    })
}

fn completed(result: &CallToolResult) -> TaskEnd {
    TaskEnd {
        state: TaskState::Completed,
        message: None,
        outcome: serde_json::to_string(result).unwrap_or_default(),
    }
}

fn cancelled() -> TaskEnd {
    TaskEnd {
        state: TaskState::Cancelled,
        message: None,
        outcome: String::new(),
    }
}

type Inputs = Option<mpsc::Receiver<InputDelivery>>;

/// Records a task and runs `work(task id, cancel, inputs)` as it (with `inputs` when it takes
/// input); answers the handle once the record exists, so an immediate `tasks/get` finds it.
async fn start<W, F>(
    answerer: &Answerer,
    caller: &Arc<Account>,
    name: &str,
    takes_input: bool,
    work: W,
) -> Result<CallToolResponse, McpError>
where
    W: FnOnce(String, CancellationToken, Inputs) -> F + Send + 'static,
    F: std::future::Future<Output = TaskEnd> + Send + 'static,
{
    let tasks = answerer.app().tasks().clone();
    let task = tasks
        .create(&caller.id, name, tasks.ttl_for(None))
        .await
        .map_err(|e| crate::error::task_error(&e))?;
    let cancel = CancellationToken::new();
    let (sender, receiver) = if takes_input {
        let (s, r) = mpsc::channel(4);
        (Some(s), Some(r))
    } else {
        (None, None)
    };
    let future = work(task.id.clone(), cancel.clone(), receiver);
    tasks.run(&task, cancel, None, sender, future);
    let poll = tasks.poll_interval_ms();
    Ok(CallToolResponse::Task(CreateTaskResult::new(
        task_wire::v2_task(&task, poll),
    )))
}

async fn asking(
    answerer: &Answerer,
    caller: &Arc<Account>,
    name: &str,
    keys: &'static [&'static str],
) -> Result<CallToolResponse, McpError> {
    let tasks = answerer.app().tasks().clone();
    start(
        answerer,
        caller,
        name,
        true,
        move |id, cancel, inputs| async move {
            wait_for_input(&tasks, &id, &cancel, inputs, keys).await
        },
    )
    .await
}

/// One elicitation per pending key, as the task's input requests.
fn requests_of(pending: &[String]) -> String {
    let requests: Map<String, Value> = pending
        .iter()
        .map(|key| {
            (
                key.clone(),
                elicit(&format!("Confirm {key}?"), "confirm", "boolean"),
            )
        })
        .collect();
    Value::Object(requests).to_string()
}

/// Parks the task in `input_required` until every key was answered (answers to other keys are
/// ignored; each delivery is acknowledged once the state shows it), then completes it.
async fn wait_for_input(
    tasks: &Arc<Tasks>,
    id: &str,
    cancel: &CancellationToken,
    inputs: Inputs,
    keys: &[&str],
) -> TaskEnd {
    let Some(mut inputs) = inputs else {
        return cancelled();
    };
    let mut pending: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let _ = tasks
        .set_state(
            id,
            TaskState::InputRequired,
            None,
            Some(&requests_of(&pending)),
        )
        .await;
    loop {
        let delivery = tokio::select! {
            delivery = inputs.recv() => delivery,
            () = cancel.cancelled() => return cancelled(),
        };
        let Some(delivery) = delivery else {
            return cancelled();
        };
        pending.retain(|key| !delivery.responses.contains_key(key));
        if pending.is_empty() {
            let _ = tasks.set_state(id, TaskState::Working, None, None).await;
            let _ = delivery.taken.send(());
            return completed(&text("done: every input was given"));
        }
        let _ = tasks
            .set_state(
                id,
                TaskState::InputRequired,
                None,
                Some(&requests_of(&pending)),
            )
            .await;
        let _ = delivery.taken.send(());
    }
}
