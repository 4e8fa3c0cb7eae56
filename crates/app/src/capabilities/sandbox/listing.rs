//! `sessions` on the read tool (the account's live sessions) and `close_session` on the write
//! tool (end one now, with its variables and files).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_sandbox::MAX_SESSION_ID_BYTES;

use super::{Sandbox, account_key};
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind,
};
use crate::schema::FieldKind;

/// `sessions: true`.
pub struct ListSessions {
    sandbox: Arc<Sandbox>,
}

impl ListSessions {
    pub(super) fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl Capability for ListSessions {
    fn key(&self) -> &'static str {
        "sessions"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "`sessions: true` lists your sandbox sessions: id, age, idle time, memory, whether a \
         call runs in it, and whether it is live, hibernated (its next call restores it) or \
         dropped (over the checkpoint quota), with its checkpoint's size and age."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "sessions",
            kind: FieldKind::Boolean,
            description: "true: list your live sessions",
        }]
    }

    fn output_schema(&self) -> Value {
        json!({"type": "object", "properties": {"sessions": {"type": "array", "items": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "age_s": {"type": "number"},
                           "idle_s": {"type": "number"},
                           "memory_bytes": {"type": ["integer", "null"]},
                           "busy": {"type": "boolean"},
                           "state": {"type": "string", "enum": ["live", "hibernated", "dropped"]},
                           "checkpoint": {"type": ["object", "null"], "properties": {
                               "bytes": {"type": "integer"}, "age_s": {"type": "number"}}}},
            "required": ["id", "age_s", "idle_s", "memory_bytes", "busy", "state"]}}},
            "required": ["sessions"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.get("sessions").and_then(Value::as_bool) == Some(true)
    }

    async fn run(&self, ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        let listed = self.sandbox.sessions.list(&account_key(ctx)).await;
        let rows: Vec<Value> = listed
            .iter()
            .map(|s| {
                let checkpoint = s
                    .checkpoint
                    .as_ref()
                    .map(|c| json!({"bytes": c.stored_bytes, "age_s": seconds(checkpoint_age(c))}));
                json!({"id": s.id, "age_s": seconds(s.age), "idle_s": seconds(s.idle),
                       "memory_bytes": s.memory_bytes, "busy": s.busy,
                       "state": state(s), "checkpoint": checkpoint})
            })
            .collect();
        let text = if listed.is_empty() {
            "no sessions".to_owned()
        } else {
            let lines: Vec<String> = listed
                .iter()
                .map(|s| {
                    let memory = s.memory_bytes.map_or("memory unknown".to_owned(), |b| {
                        format!("{:.1} MiB", b as f64 / 1_048_576.0)
                    });
                    let busy = if s.busy { ", running a call" } else { "" };
                    let kept = s.checkpoint.as_ref().map_or(String::new(), |c| {
                        format!(
                            ", checkpoint {:.1} MiB of {:.0} s ago",
                            c.stored_bytes as f64 / 1_048_576.0,
                            checkpoint_age(c).as_secs_f64()
                        )
                    });
                    format!(
                        "{}: {}, open {:.0} s, idle {:.0} s, {memory}{busy}{kept}",
                        s.id,
                        state(s),
                        s.age.as_secs_f64(),
                        s.idle.as_secs_f64()
                    )
                })
                .collect();
            format!("{} session(s):\n{}", listed.len(), lines.join("\n"))
        };
        Ok(Output {
            content: vec![ContentItem::Text(text)],
            structured: json!({"sessions": rows}),
            is_error: false,
            ..Output::default()
        })
    }
}

/// `live` or `hibernated`.
fn state(session: &toolgate_sandbox::SandboxSessionInfo) -> &'static str {
    session.state.as_str()
}

fn checkpoint_age(checkpoint: &toolgate_sandbox::CheckpointInfo) -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(checkpoint.saved_at)
        .unwrap_or_default()
}

fn seconds(span: std::time::Duration) -> f64 {
    (span.as_secs_f64() * 10.0).round() / 10.0
}

/// `close_session: "ID"`.
pub struct CloseSession {
    sandbox: Arc<Sandbox>,
}

impl CloseSession {
    pub(super) fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl Capability for CloseSession {
    fn key(&self) -> &'static str {
        "close_session"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`close_session: \"ID\"` ends one of your sessions now, with its variables and files."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "close_session",
            kind: FieldKind::Name {
                max_len: MAX_SESSION_ID_BYTES,
            },
            description: "the id of one of your sessions to end now",
        }]
    }

    fn output_schema(&self) -> Value {
        json!({"type": "object", "properties": {"id": {"type": "string"},
            "closed": {"type": "boolean"}}, "required": ["id", "closed"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("close_session")
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let id = args
            .get("close_session")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.sandbox.sessions.close(&account_key(ctx), id).await {
            return Err(Failure::new("you have no live session with that id"));
        }
        Ok(Output {
            content: vec![ContentItem::Text("closed the session".to_owned())],
            structured: json!({"id": id, "closed": true}),
            is_error: false,
            ..Output::default()
        })
    }
}
