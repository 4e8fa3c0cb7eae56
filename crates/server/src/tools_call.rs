//! A plain `tools/call` of the older generation answered without rmcp: one of the three tools,
//! asking for no progress, in a request rmcp would serve as it is. rmcp writes its answer into a
//! buffer it grows by doubling while the result is still held, so an 8 MB file read back cost
//! the server over four times the file; here the answer is written once into a buffer sized for
//! it, each content item given up as soon as it is written, and no service is built for the
//! request. Anything else (progress, an unknown tool, the 2026-07-28 generation, a parameter
//! this does not know) goes to rmcp, which has the last word.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use rmcp::ErrorData as McpError;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use toolgate_app::{CallIo, ContentItem};
use toolgate_domain::Account;

use crate::Shared;
use crate::answer::Answered;
use crate::jsonrpc::MessageInfo;
use crate::mcp_sessions::CallCancel;

/// `params` of a call this path takes: nothing but the tool and its arguments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    /// An empty `_meta` is no request for anything.
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct Envelope {
    params: PlainCall,
}

/// The answer to `body` when it is a plain call of one of the tools; `None` leaves the request
/// to rmcp.
pub async fn answer(
    state: &Shared,
    account: &Arc<Account>,
    parts: &Parts,
    body: &[u8],
    info: &MessageInfo,
) -> Option<Response> {
    if info.method.as_deref() != Some("tools/call") || info.per_request_version {
        return None;
    }
    let id = info.id.clone()?;
    if !state.tools_list.as_ref()?.serves(parts) {
        return None;
    }
    let call = serde_json::from_slice::<Envelope>(body).ok()?.params;
    if call.meta.as_ref().is_some_and(|meta| !meta.is_empty()) || !state.handler.is_tool(&call.name)
    {
        return None;
    }
    // in a legacy session, `notifications/cancelled` cancels the call through this token;
    // a client that goes away drops this future, and the guard cancels it then
    let cancel = parts
        .extensions
        .get::<CallCancel>()
        .map_or_else(CancellationToken::new, |CallCancel(token)| token.clone());
    let gone = cancel.clone().drop_guard();
    let (handler, caller, token) = (state.handler.clone(), account.clone(), cancel.clone());
    let started = Instant::now();
    // the call runs in a task of its own, as under rmcp: the client leaving cancels it, and
    // it ends as it ends on cancellation rather than being dropped half-way
    let task = tokio::spawn(async move {
        let io = CallIo {
            cancel: Some(&token),
            ..CallIo::default()
        };
        handler
            .answer(&caller, &call.name, call.arguments, io, started)
            .await
    });
    // the call ran (or began): from here on it is answered here, never handed to rmcp again
    let answered = match task.await {
        Ok(answered) => answered,
        Err(_) => Err(McpError::internal_error(
            "the call failed inside the service; nothing more is known",
            None,
        )),
    };
    drop(gone.disarm());
    Some(json_response(write(&id, answered)))
}

fn json_response(body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The JSON-RPC response, as rmcp writes it for the older generation.
fn write(id: &Value, answered: Result<Answered, McpError>) -> Vec<u8> {
    let answered = match answered {
        Ok(answered) => answered,
        Err(error) => {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
            return serde_json::to_vec(&body).unwrap_or_default();
        }
    };
    let mut out = Vec::with_capacity(room_for(&answered) + 256);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    push_json(&mut out, id);
    out.extend_from_slice(b",\"result\":{\"content\":[");
    for (n, item) in answered.content.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        // written, then dropped: a large file is never held twice
        push_json(&mut out, &item_json(item));
    }
    out.push(b']');
    if let Some(structured) = answered.structured {
        out.extend_from_slice(b",\"structuredContent\":");
        push_json(&mut out, &Value::Object(structured));
    }
    out.extend_from_slice(if answered.is_error {
        b",\"isError\":true}}"
    } else {
        b",\"isError\":false}}"
    });
    out
}

/// Appends `value` as JSON (which cannot fail for a `Value` written into memory).
fn push_json(out: &mut Vec<u8>, value: &Value) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A content item as MCP writes it; its strings are moved, not copied (`json!` would copy
/// them).
fn item_json(item: ContentItem) -> Value {
    let mut fields = Map::new();
    match item {
        ContentItem::Text(text) => {
            fields.insert("type".to_owned(), Value::from("text"));
            fields.insert("text".to_owned(), Value::String(text));
        }
        ContentItem::Image { data, mime_type } => {
            fields.insert("type".to_owned(), Value::from("image"));
            fields.insert("data".to_owned(), Value::String(data));
            fields.insert("mimeType".to_owned(), Value::String(mime_type));
        }
        ContentItem::ResourceLink(link) => {
            fields.insert("type".to_owned(), Value::from("resource_link"));
            fields.insert("uri".to_owned(), Value::String(link.uri));
            fields.insert("name".to_owned(), Value::String(link.name));
            fields.insert("mimeType".to_owned(), Value::String(link.mime_type));
            fields.insert("size".to_owned(), Value::from(link.size));
            fields.insert("description".to_owned(), Value::String(link.description));
        }
    }
    Value::Object(fields)
}

/// Bytes the answer's strings take, and a little for everything around them: the buffer is
/// sized once for the usual answer (one that needs many escapes grows as usual).
fn room_for(answered: &Answered) -> usize {
    let content: usize = answered
        .content
        .iter()
        .map(|item| match item {
            ContentItem::Text(text) => text.len() + 32,
            ContentItem::Image { data, mime_type } => data.len() + mime_type.len() + 48,
            ContentItem::ResourceLink(link) => {
                link.uri.len() + link.name.len() + link.description.len() + 128
            }
        })
        .sum();
    let structured = answered.structured.as_ref().map_or(0, |fields| {
        // iterative: a tenant's JSON may sit deep in a structured result
        let mut room = 2;
        let mut pending: Vec<&Value> = fields.values().collect();
        room += fields.keys().map(|key| key.len() + 4).sum::<usize>();
        while let Some(value) = pending.pop() {
            match value {
                Value::String(text) => room += text.len() + 2,
                Value::Array(items) => {
                    room += 2 + items.len();
                    pending.extend(items);
                }
                Value::Object(members) => {
                    room += 2 + members.keys().map(|key| key.len() + 4).sum::<usize>();
                    pending.extend(members.values());
                }
                _ => room += 24,
            }
        }
        room
    });
    content + structured
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answered(is_error: bool, structured: Option<Value>) -> Answered {
        Answered {
            content: vec![
                ContentItem::Text("a \"quoted\" line\nand é".into()),
                ContentItem::Image {
                    data: "iVBORw0KGgo=".into(),
                    mime_type: "image/png".into(),
                },
                ContentItem::ResourceLink(toolgate_app::ResourceLink {
                    uri: "https://tools.example/files/p.s/out.txt".into(),
                    name: "out.txt".into(),
                    mime_type: "text/plain; charset=utf-8".into(),
                    size: 10_000_001,
                    description: "the whole output".into(),
                }),
            ],
            structured: structured.map(|v| v.as_object().unwrap().clone()),
            is_error,
        }
    }

    /// What rmcp writes for the same answer, for a peer of the older generation.
    fn as_rmcp_writes(id: &Value, answered: Answered) -> Value {
        let mut result = serde_json::to_value(answered.into_rmcp()).unwrap();
        result.as_object_mut().unwrap().remove("resultType");
        serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
    }

    #[test]
    fn the_answer_is_what_rmcp_would_write() {
        let structured = serde_json::json!({"python": {"stdout": "x", "rows": [[1, "a"], {"deep": [null, true, 2.5]}]}});
        for (id, is_error, structured) in [
            (Value::from(7), false, Some(structured.clone())),
            (Value::from("call-1"), true, Some(structured)),
            (Value::from(0), true, None),
        ] {
            let written: Value =
                serde_json::from_slice(&write(&id, Ok(answered(is_error, structured.clone()))))
                    .unwrap();
            assert_eq!(
                written,
                as_rmcp_writes(&id, answered(is_error, structured)),
                "{id}"
            );
        }
        let error = McpError::new(rmcp::model::ErrorCode(-32002), "top up", None);
        let written: Value = serde_json::from_slice(&write(&Value::from(3), Err(error))).unwrap();
        assert_eq!(written["error"]["code"], -32002);
        assert_eq!(written["error"]["message"], "top up");
        assert_eq!(written["id"], 3);
    }

    #[test]
    fn the_buffer_is_sized_once_for_an_answer_without_escapes() {
        let big = "A".repeat(1 << 20);
        let answered = Answered {
            content: vec![ContentItem::Image {
                data: big,
                mime_type: "image/png".into(),
            }],
            structured: Some(
                serde_json::json!({"file": {"path": "p.png", "size": 786432}})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
            is_error: false,
        };
        let room = room_for(&answered) + 256;
        let out = write(&Value::from(1), Ok(answered));
        assert!(
            out.len() <= room && out.capacity() == room,
            "{} of {room}",
            out.len()
        );
    }
}
