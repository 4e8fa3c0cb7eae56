//! JSON-RPC error responses produced before a request reaches rmcp, and the shape check that
//! decides between -32700, -32600 and "pass it on".

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON, but not a JSON-RPC message.
pub const INVALID_REQUEST: i64 = -32600;
/// No valid key.
pub const UNAUTHENTICATED: i64 = -32001;
/// Allowance used up and the wallet cannot pay.
pub const PAYMENT_REQUIRED: i64 = -32002;
/// Not one of the three tools.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Something on our side failed.
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error response with its HTTP status; `id` is echoed when it could be read.
pub fn error_response(status: StatusCode, code: i64, message: &str, id: Option<Value>) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    });
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Why a body cannot go on to the MCP layer.
#[derive(Debug, PartialEq)]
pub enum Rejection {
    /// not JSON at all (including invalid UTF-8)
    NotJson(String),
    /// JSON of the wrong shape; the id is echoed when it was readable
    NotJsonRpc(&'static str, Option<Value>),
}

impl Rejection {
    /// The JSON-RPC error code this rejection maps to.
    pub fn code(&self) -> i64 {
        match self {
            Rejection::NotJson(_) => PARSE_ERROR,
            Rejection::NotJsonRpc(..) => INVALID_REQUEST,
        }
    }

    /// The 400 response.
    pub fn into_response(self) -> Response {
        match self {
            Rejection::NotJson(detail) => error_response(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                &format!("Parse error: the request body is not valid JSON ({detail})"),
                None,
            ),
            Rejection::NotJsonRpc(reason, id) => error_response(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                &format!("Invalid Request: {reason}"),
                id,
            ),
        }
    }
}

/// What the entry needs to know about a message to route it.
#[derive(Debug, Default, PartialEq)]
pub struct MessageInfo {
    /// The method, for requests and notifications.
    pub method: Option<String>,
    /// It carries a per-request protocol version (the 2026-07-28 stateless generation).
    pub per_request_version: bool,
    /// The request's id; `None` for notifications.
    pub id: Option<Value>,
    /// For `notifications/cancelled`: the id of the request it cancels.
    pub cancels: Option<Value>,
    /// `params` is absent or holds nothing but `_meta` (no cursor, no arguments).
    pub plain_params: bool,
}

impl MessageInfo {
    /// An `initialize` of the older generation, which opens a legacy session.
    pub fn opens_session(&self) -> bool {
        self.method.as_deref() == Some("initialize") && !self.per_request_version
    }
}

/// Checks that `body` is one JSON-RPC 2.0 request, notification or response.
pub fn check_message(body: &[u8]) -> Result<MessageInfo, Rejection> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Rejection::NotJson(describe_parse_error(&err)))?;
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err(Rejection::NotJsonRpc(
                "batch requests are not supported (MCP removed batching in 2025-06-18); send one message per POST",
                None,
            ));
        }
        _ => {
            return Err(Rejection::NotJsonRpc(
                "the body must be a JSON object",
                None,
            ));
        }
    };
    let id = object.get("id").cloned();
    let id_ok = match &id {
        None => true,
        Some(Value::String(_)) => true,
        Some(Value::Number(n)) => n.is_i64() || n.is_u64(),
        Some(_) => false,
    };
    if !id_ok {
        return Err(Rejection::NotJsonRpc(
            "`id` must be a string or an integer",
            None,
        ));
    }
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Rejection::NotJsonRpc(
            "`jsonrpc` must be the string \"2.0\"",
            id,
        ));
    }
    match object.get("method") {
        Some(Value::String(method)) if !method.is_empty() => match object.get("params") {
            None => Ok(MessageInfo {
                method: Some(method.clone()),
                id,
                plain_params: true,
                ..MessageInfo::default()
            }),
            Some(Value::Object(params)) => Ok(MessageInfo {
                method: Some(method.clone()),
                per_request_version: params
                    .get("_meta")
                    .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
                    .is_some(),
                cancels: params.get("requestId").cloned().filter(|_| id.is_none()),
                plain_params: params.keys().all(|key| key == "_meta"),
                id,
            }),
            Some(_) => Err(Rejection::NotJsonRpc("`params` must be an object", id)),
        },
        Some(_) => Err(Rejection::NotJsonRpc(
            "`method` must be a non-empty string",
            id,
        )),
        None if id.is_some() && (object.contains_key("result") || object.contains_key("error")) => {
            Ok(MessageInfo::default())
        }
        None => Err(Rejection::NotJsonRpc("a request needs a `method`", id)),
    }
}

/// serde_json's message without echoing input, which may hold secrets.
fn describe_parse_error(err: &serde_json::Error) -> String {
    format!("line {}, column {}", err.line(), err.column())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn code(body: &[u8]) -> Option<i64> {
        check_message(body).err().map(|r| r.code())
    }

    #[test]
    fn classifies_bodies() {
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            None
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            None
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#), None);
        assert_eq!(code(b"not json"), Some(PARSE_ERROR));
        assert_eq!(code(b""), Some(PARSE_ERROR));
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"),
            Some(PARSE_ERROR)
        );
        assert_eq!(code(b"[]"), Some(INVALID_REQUEST));
        assert_eq!(code(b"42"), Some(INVALID_REQUEST));
        assert_eq!(
            code(br#"{"id":1,"method":"tools/list"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1}"#), Some(INVALID_REQUEST));
    }

    #[test]
    fn tells_session_openers_apart() {
        let legacy =
            check_message(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#)
                .unwrap();
        assert!(legacy.opens_session());
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(!check_message(modern).unwrap().opens_session());
        assert!(
            !check_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
                .unwrap()
                .opens_session()
        );
    }

    #[test]
    fn echoes_a_readable_id() {
        let rejection = check_message(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!(
            rejection,
            Rejection::NotJsonRpc("`jsonrpc` must be the string \"2.0\"", Some(json!(7)))
        );
    }
}
