//! `upload_url` on the write tool: a signed link that takes one `PUT` of a file into a session's
//! workspace, so a file a person has (a CSV, an image) reaches the session without passing
//! through the model's context.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_sandbox::{MAX_SESSION_ID_BYTES, MAX_WORKSPACE_PATH_BYTES, workspace_path_parts};

use super::{Sandbox, account_key};
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind,
};
use crate::links::Links;
use crate::schema::FieldKind;

/// Makes upload links.
pub struct UploadLink {
    links: Arc<Links>,
}

impl UploadLink {
    /// The capability, when `sandbox` makes links.
    pub(super) fn of(sandbox: &Arc<Sandbox>) -> Option<Self> {
        sandbox.links.clone().map(|links| Self { links })
    }
}

fn field_schema(description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": MAX_WORKSPACE_PATH_BYTES,
                     "description": "where the file goes, relative to the workspace"},
            "session_id": {"type": "string", "minLength": 1, "maxLength": MAX_SESSION_ID_BYTES,
                           "description": "the session whose workspace takes it"},
        },
        "required": ["path", "session_id"],
        "additionalProperties": false,
    })
}

/// `{path, session_id}`: both strings, the path one a workspace can hold, the id a session's.
fn check_field(name: &str, value: &Value) -> Result<(), String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "field `{name}` must be an object {{\"path\": …, \"session_id\": …}}"
        ));
    };
    if let Some(other) = fields
        .keys()
        .find(|key| !matches!(key.as_str(), "path" | "session_id"))
    {
        return Err(format!("field `{name}` has an unknown key `{other}`"));
    }
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    let path = text("path").ok_or_else(|| format!("field `{name}.path` must be a string"))?;
    workspace_path_parts(path).map_err(|problem| format!("field `{name}.path`: {problem}"))?;
    match text("session_id") {
        Some(id)
            if !id.is_empty()
                && id.len() <= MAX_SESSION_ID_BYTES
                && !id.contains(char::is_control) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "field `{name}.session_id` must be 1 to {MAX_SESSION_ID_BYTES} bytes without control \
             characters"
        )),
    }
}

#[async_trait]
impl Capability for UploadLink {
    fn key(&self) -> &'static str {
        "upload_url"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`upload_url: {path, session_id}` answers a URL for one key-less PUT of a file into \
         that session's workspace, bypassing this chat."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "upload_url",
            kind: FieldKind::Custom {
                schema: field_schema,
                check: check_field,
            },
            description: "{\"path\": \"data/in.csv\", \"session_id\": \"s1\"}: a URL for one PUT \
                          of that file into that session",
        }]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        let int = json!({"type": "integer"});
        json!({"type": "object", "properties": {
            "url": text, "method": text, "path": text, "session_id": text,
            "max_bytes": int, "expires_in_s": int,
        }, "required": ["url", "method", "path", "session_id"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("upload_url")
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let asked = args.get("upload_url");
        let text = |key: &str| {
            asked
                .and_then(|asked| asked.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (path, session) = (text("path"), text("session_id"));
        let url = self
            .links
            .upload_url(&account_key(ctx), session, path)
            .map_err(|error| Failure::new(error.to_string()))?;
        let (max_bytes, ttl) = (self.links.upload_limit(), self.links.upload_ttl().as_secs());
        Ok(Output {
            content: vec![ContentItem::Text(format!(
                "Upload URL for `{path}` in session `{session}`: one PUT of up to {max_bytes} \
                 bytes within {ttl} s, no key needed (curl -T FILE 'URL'):\n{url}"
            ))],
            structured: json!({
                "url": url, "method": "PUT", "path": path, "session_id": session,
                "max_bytes": max_bytes, "expires_in_s": ttl,
            }),
            ..Output::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_checked_with_a_clear_error() {
        let check = |value: Value| check_field("upload_url", &value);
        assert!(check(json!({"path": "in/data.csv", "session_id": "s1"})).is_ok());
        for (value, says) in [
            (json!({"path": "../x", "session_id": "s"}), "'..'"),
            (
                json!({"path": "/etc/passwd", "session_id": "s"}),
                "relative",
            ),
            (json!({"path": "a\u{0}b", "session_id": "s"}), "NUL"),
            (json!({"path": "a", "session_id": ""}), "session_id"),
            (json!({"path": "a"}), "session_id"),
            (json!({"session_id": "s"}), "path"),
            (
                json!({"path": "a", "session_id": "s", "mode": 1}),
                "unknown key",
            ),
            (json!("a.csv"), "object"),
        ] {
            let error = check(value.clone()).unwrap_err();
            assert!(error.contains(says), "{value}: {error}");
        }
    }
}
