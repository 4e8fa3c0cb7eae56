//! A stored task as each wire generation shows it: 2025-11-25's experimental `Task` (`ttl`,
//! `pollInterval`, a tool's error result shown as `failed`, the result fetched by
//! `tasks/result`) and the 2026-07-28 extension's `DetailedTask` (`ttlMs`, `pollIntervalMs`, a
//! tool's error result `completed` with `isError`, the result or error inlined).

use rmcp::model::{DetailedTask, InputRequests, JsonObject, Task, TaskPayload, TaskStatus};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_app::tasks::{TaskRecord, TaskState};
use toolgate_domain::time_reexport::OffsetDateTime;
use toolgate_domain::time_reexport::format_description::well_known::Rfc3339;

/// Unix milliseconds as ISO 8601 (UTC).
fn iso(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

fn positive(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).max(1)
}

/// How much of a tool's error text a 2025-11-25 status message carries.
const ERROR_SHOWN: usize = 2000;

/// A stored result's error text when it is a tool's error result (`isError: true`): the start
/// of its first text item.
fn error_text(outcome: Option<&str>) -> Option<String> {
    #[derive(Deserialize)]
    struct Item {
        #[serde(default)]
        text: Option<String>,
    }
    #[derive(Deserialize)]
    struct Flagged {
        #[serde(default, rename = "isError")]
        is_error: bool,
        #[serde(default)]
        content: Vec<Item>,
    }
    let result = serde_json::from_str::<Flagged>(outcome?).ok()?;
    if !result.is_error {
        return None;
    }
    let first = result.content.into_iter().find_map(|item| item.text);
    Some(first.map_or_else(
        || "the tool reported an error; tasks/result has it".to_owned(),
        |text| text.chars().take(ERROR_SHOWN).collect(),
    ))
}

/// The 2025-11-25 status and message: a tool's error result is `failed` there (as that
/// revision says), with the error's text as the message, since clients show failed tasks by it
/// alone; `tasks/result` still answers the whole result.
fn v1_status(task: &TaskRecord) -> (&'static str, Option<String>) {
    if task.state == TaskState::Completed
        && let Some(text) = error_text(task.outcome.as_deref())
    {
        return ("failed", Some(text));
    }
    (task.state.as_str(), task.status_message.clone())
}

/// A 2025-11-25 `Task`.
pub(crate) fn v1_task(task: &TaskRecord, poll_ms: u64) -> Value {
    let (status, message) = v1_status(task);
    let mut shown = json!({
        "taskId": task.id,
        "status": status,
        "createdAt": iso(task.created_ms),
        "lastUpdatedAt": iso(task.updated_ms),
        "ttl": positive(task.ttl_ms),
        "pollInterval": poll_ms,
    });
    if let (Some(message), Some(object)) = (message, shown.as_object_mut()) {
        object.insert("statusMessage".to_owned(), Value::String(message));
    }
    shown
}

/// The 2026-07-28 `Task` fields of a task.
pub(crate) fn v2_task(task: &TaskRecord, poll_ms: u64) -> Task {
    let status = match task.state {
        TaskState::Working => TaskStatus::Working,
        TaskState::InputRequired => TaskStatus::InputRequired,
        TaskState::Completed => TaskStatus::Completed,
        TaskState::Failed => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    };
    let mut shown = Task::new(
        task.id.clone(),
        status,
        iso(task.created_ms),
        iso(task.updated_ms),
    )
    .with_ttl_ms(positive(task.ttl_ms))
    .with_poll_interval_ms(poll_ms);
    if let Some(message) = &task.status_message {
        shown = shown.with_status_message(message.clone());
    }
    shown
}

fn object_of(text: Option<&str>) -> Option<JsonObject> {
    match serde_json::from_str(text?) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

/// A 2026-07-28 `DetailedTask`: the result or error inlined once ended.
pub(crate) fn v2_detailed(task: &TaskRecord, poll_ms: u64) -> DetailedTask {
    let lost = || {
        let mut error = JsonObject::new();
        error.insert("code".to_owned(), json!(-32603));
        error.insert(
            "message".to_owned(),
            json!("the task's outcome could not be read back"),
        );
        error
    };
    let payload = match task.state {
        TaskState::Working => TaskPayload::Working,
        TaskState::Cancelled => TaskPayload::Cancelled,
        TaskState::InputRequired => TaskPayload::InputRequired {
            input_requests: task
                .input_requests
                .as_deref()
                .and_then(|text| serde_json::from_str::<InputRequests>(text).ok())
                .unwrap_or_default(),
        },
        TaskState::Completed => match object_of(task.outcome.as_deref()) {
            Some(result) => TaskPayload::Completed { result },
            None => TaskPayload::Failed { error: lost() },
        },
        TaskState::Failed => TaskPayload::Failed {
            error: object_of(task.outcome.as_deref()).unwrap_or_else(lost),
        },
    };
    DetailedTask::new(v2_task(task, poll_ms), payload)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use toolgate_domain::AccountId;

    fn record(state: TaskState, outcome: Option<&str>) -> TaskRecord {
        TaskRecord {
            id: "t1".to_owned(),
            owner: AccountId::from_stored("a".to_owned()),
            tool: "svc_write".to_owned(),
            state,
            status_message: None,
            input_requests: None,
            outcome: outcome.map(str::to_owned),
            created_ms: 1_764_000_000_000,
            updated_ms: 1_764_000_001_500,
            ttl_ms: 3_600_000,
            runner: "r".to_owned(),
        }
    }

    #[test]
    fn a_tools_error_result_fails_in_2025_and_completes_in_2026() {
        let erred = record(
            TaskState::Completed,
            Some(r#"{"content":[{"type":"text","text":"boom"}],"isError":true}"#),
        );
        let v1 = v1_task(&erred, 1000);
        assert_eq!(v1["status"], "failed");
        assert_eq!(v1["ttl"], 3_600_000);
        assert_eq!(v1["createdAt"], "2025-11-24T16:00:00Z");
        assert_eq!(
            v1["statusMessage"], "boom",
            "the tool's error text is the message"
        );
        let v2 = serde_json::to_value(v2_detailed(&erred, 1000)).unwrap();
        assert_eq!(v2["status"], "completed");
        assert_eq!(v2["result"]["isError"], true);
        assert_eq!(v2["ttlMs"], 3_600_000);
        assert!(v2.get("ttl").is_none() && v2.get("error").is_none());
        let fine = record(TaskState::Completed, Some(r#"{"content":[]}"#));
        assert_eq!(v1_task(&fine, 1000)["status"], "completed");
    }

    #[test]
    fn a_failed_task_inlines_its_error_and_no_result() {
        let failed = record(
            TaskState::Failed,
            Some(r#"{"code":-32002,"message":"no funds"}"#),
        );
        let v2 = serde_json::to_value(v2_detailed(&failed, 500)).unwrap();
        assert_eq!(v2["error"]["code"], -32002);
        assert!(v2.get("result").is_none());
        let garbled = record(TaskState::Completed, Some("not json"));
        let v2 = serde_json::to_value(v2_detailed(&garbled, 500)).unwrap();
        assert_eq!(
            v2["status"], "failed",
            "an unreadable result is not shown as a result"
        );
    }
}
