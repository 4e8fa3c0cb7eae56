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
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use toolgate_app::stages::{self, Stage, Stages};
use toolgate_app::{CallIo, ContentItem};
use toolgate_domain::Account;

use crate::Shared;
use crate::answer::Answered;
use crate::jsonrpc::MessageInfo;
use crate::mcp_sessions::{CallCancel, CallOrigin};
use toolgate_run_to_end::{Panicked, RunToEnd};

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
    let call = Call {
        name: call.name,
        arguments: call.arguments,
        origin: None,
    };
    Some(run(state, account, parts, &id, call, Generation::Legacy).await)
}

/// Which generation's result shape an answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Generation {
    /// 2025-11-25 and earlier: the result as it always was.
    Legacy,
    /// 2026-07-28: every result says `resultType: "complete"` (rmcp adds it for these peers).
    Stateless,
}

/// A call this path answers: the tool, its arguments, and who makes it where (`None`: the
/// request's [`CallOrigin`] extension, if any).
pub(crate) struct Call {
    pub(crate) name: String,
    pub(crate) arguments: Option<Map<String, Value>>,
    pub(crate) origin: Option<CallOrigin>,
}

/// Runs a call of one of the tools, already found to be one this server answers itself, and
/// writes its JSON answer for `generation`.
pub(crate) async fn run(
    state: &Shared,
    account: &Arc<Account>,
    parts: &Parts,
    id: &Value,
    call: Call,
    generation: Generation,
) -> Response {
    let Call {
        name,
        arguments,
        origin,
    } = call;
    let origin = origin
        .or_else(|| parts.extensions.get::<CallOrigin>().cloned())
        .unwrap_or_default();
    // in a legacy session, `notifications/cancelled` cancels the call through this token;
    // a client that goes away drops this future, and `RunToEnd` cancels it then
    let cancel = parts
        .extensions
        .get::<CallCancel>()
        .map_or_else(CancellationToken::new, |CallCancel(token)| token.clone());
    let (handler, caller, token) = (state.handler.clone(), account.clone(), cancel.clone());
    let started = Instant::now();
    let clock = parts
        .extensions
        .get::<ServerTiming>()
        .map(|ServerTiming(stages)| stages.clone());
    let in_task = clock.clone();
    // polled here, not in a task of its own; dropped half-way (the client left), the rest of it
    // runs in one, so it ends as it ends on cancellation rather than being dropped half-way
    let work = RunToEnd::new(
        async move {
            let io = CallIo {
                cancel: Some(&token),
                client: origin.client.as_deref(),
                session: origin.session.as_deref(),
                ..CallIo::default()
            };
            let work = handler.answer(&caller, &name, arguments, io, started);
            match in_task {
                Some(stages) => stages::scope(stages, work).await,
                None => work.await,
            }
        },
        cancel,
    );
    // the call ran (or began): from here on it is answered here, never handed to rmcp again
    let answered = match work.await {
        Ok(answered) => answered,
        Err(Panicked) => Err(McpError::internal_error(
            "the call failed inside the service; nothing more is known",
            None,
        )),
    };
    let status = match (&answered, generation) {
        (Err(error), Generation::Stateless) => stateless_error_status(error),
        _ => StatusCode::OK,
    };
    let mut response = json_response(write(id, answered, generation));
    *response.status_mut() = status;
    if let Some(stages) = clock {
        stages.mark(Stage::Encoded);
        if let Ok(value) = HeaderValue::from_str(&stages.header_value()) {
            response.headers_mut().insert(SERVER_TIMING, value);
        }
    }
    response
}

/// The `Server-Timing` answer header (not among `http`'s names).
pub(crate) const SERVER_TIMING: header::HeaderName =
    header::HeaderName::from_static("server-timing");

/// The clock of a request whose answer says where its time went (the `server_timing` setting),
/// put in its extensions at the front door.
#[derive(Clone)]
pub(crate) struct ServerTiming(pub(crate) Arc<Stages>);

/// The HTTP status rmcp gives a 2026-07-28 request's JSON-RPC error (a legacy one is always
/// 200): the refusals of the protocol itself 400, an unknown method or tool 404.
fn stateless_error_status(error: &McpError) -> StatusCode {
    match error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

fn json_response(body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The JSON-RPC response, as rmcp writes it for a peer of `generation`.
fn write(id: &Value, answered: Result<Answered, McpError>, generation: Generation) -> Vec<u8> {
    let answered = match answered {
        Ok(answered) => answered,
        Err(error) => {
            let mut out = Vec::new();
            push_envelope(&mut out, id);
            out.extend_from_slice(b",\"error\":");
            push_json(&mut out, &error);
            out.push(b'}');
            return out;
        }
    };
    let mut out = Vec::with_capacity(room_for(&answered) + ROOM_AROUND);
    push_envelope(&mut out, id);
    out.extend_from_slice(match generation {
        Generation::Legacy => b",\"result\":{\"content\":[".as_slice(),
        Generation::Stateless => b",\"result\":{\"resultType\":\"complete\",\"content\":[",
    });
    for (n, item) in answered.content.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        // written, then dropped: a large file is never held twice
        push_item(&mut out, &item);
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

/// The start of a JSON-RPC response, as rmcp orders its members.
fn push_envelope(out: &mut Vec<u8>, id: &Value) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    push_json(out, id);
}

/// Bytes for what surrounds the content: the envelope, the id, `resultType` and `isError`.
const ROOM_AROUND: usize = 256;

/// Appends `value` as JSON (which cannot fail for a string or a `Value` written into memory).
fn push_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Writes a content item as rmcp does, its members in rmcp's order.
fn push_item(out: &mut Vec<u8>, item: &ContentItem) {
    match item {
        ContentItem::Text(text) => {
            out.extend_from_slice(br#"{"type":"text","text":"#);
            push_json(out, text);
        }
        ContentItem::Image { data, mime_type } => {
            out.extend_from_slice(br#"{"type":"image","data":"#);
            push_json(out, data);
            out.extend_from_slice(br#","mimeType":"#);
            push_json(out, mime_type);
        }
        ContentItem::ResourceLink(link) => {
            out.extend_from_slice(br#"{"type":"resource_link","uri":"#);
            push_json(out, &link.uri);
            out.extend_from_slice(br#","name":"#);
            push_json(out, &link.name);
            out.extend_from_slice(br#","description":"#);
            push_json(out, &link.description);
            out.extend_from_slice(br#","mimeType":"#);
            push_json(out, &link.mime_type);
            out.extend_from_slice(br#","size":"#);
            push_json(out, &link.size);
        }
    }
    out.push(b'}');
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
    use rmcp::model::{NumberOrString, ServerJsonRpcMessage, ServerResult};

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

    /// What rmcp writes for the same answer to a peer of `generation`: its own message type,
    /// with the result shaped as its handler shapes it for that generation.
    fn as_rmcp_writes(id: &Value, answered: Answered, generation: Generation) -> String {
        let id = match id {
            Value::String(text) => NumberOrString::String(text.as_str().into()),
            number => NumberOrString::Number(number.as_i64().unwrap()),
        };
        let mut result = ServerResult::CallToolResult(answered.into_rmcp());
        match generation {
            Generation::Legacy => result.strip_result_type_for_legacy_peer(),
            Generation::Stateless => result.fill_missing_cache_hints(),
        }
        serde_json::to_string(&ServerJsonRpcMessage::response(result, id)).unwrap()
    }

    #[test]
    fn the_answer_is_what_rmcp_would_write() {
        let structured = serde_json::json!({"python": {"stdout": "x", "rows": [[1, "a"], {"deep": [null, true, 2.5]}]}});
        for generation in [Generation::Legacy, Generation::Stateless] {
            for (id, is_error, structured) in [
                (Value::from(7), false, Some(structured.clone())),
                (Value::from("call-1"), true, Some(structured.clone())),
                (Value::from(0), true, None),
            ] {
                let written = write(&id, Ok(answered(is_error, structured.clone())), generation);
                // byte for byte, the members in rmcp's order
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    as_rmcp_writes(&id, answered(is_error, structured), generation),
                    "{id} {generation:?}"
                );
            }
            for data in [None, Some(serde_json::json!({"left": 0}))] {
                let error = McpError::new(ErrorCode(-32002), "top up", data);
                let written = write(&Value::from(3), Err(error.clone()), generation);
                let rmcp = ServerJsonRpcMessage::error(error, Some(NumberOrString::Number(3)));
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    serde_json::to_string(&rmcp).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_stateless_error_has_the_status_rmcp_gives_it() {
        for (code, status) in [
            (-32002, 200),
            (-32603, 200),
            (-32602, 200),
            (-32601, 404),
            (-32020, 400),
            (-32021, 400),
            (-32022, 400),
        ] {
            let error = McpError::new(ErrorCode(code), "x", None);
            assert_eq!(stateless_error_status(&error).as_u16(), status, "{code}");
        }
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
        let room = room_for(&answered) + ROOM_AROUND;
        let out = write(&Value::from(1), Ok(answered), Generation::Stateless);
        assert!(
            out.len() <= room && out.capacity() == room,
            "{} of {room}",
            out.len()
        );
    }
}
