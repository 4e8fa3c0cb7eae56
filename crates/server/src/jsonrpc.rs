//! The shape check that decides between -32700, -32600 and "pass it on" before a request
//! reaches rmcp.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a body cannot go on to the MCP layer (answered 400 by `crate::error`).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// not JSON at all (including invalid UTF-8)
    #[error("Parse error: the request body is not valid JSON ({0})")]
    NotJson(String),
    /// JSON of the wrong shape; the id is echoed when it was readable
    #[error("Invalid Request: {0}")]
    NotJsonRpc(&'static str, Option<Value>),
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
    /// `params` has a `task` member (2025-11-25's ask to run a `tools/call` as a task).
    pub asks_task: bool,
}

impl MessageInfo {
    /// An `initialize` of the older generation, which opens a legacy session.
    pub fn opens_session(&self) -> bool {
        self.method.as_deref() == Some("initialize") && !self.per_request_version
    }
}

/// Checks that `body` is one JSON-RPC 2.0 request, notification or response.
pub fn check_message(body: &[u8]) -> Result<MessageInfo, Rejection> {
    let top: TopLevel = serde_json::from_slice(body)
        .map_err(|err| Rejection::NotJson(describe_parse_error(&err)))?;
    let object = match top {
        TopLevel::Object { members, twice } => {
            if twice {
                // rmcp's typed parse refuses a field given twice, and which one counts is not
                // for this check to guess
                return Err(Rejection::NotJsonRpc(
                    "a member of the message is given twice",
                    None,
                ));
            }
            members
        }
        TopLevel::Array => {
            return Err(Rejection::NotJsonRpc(
                "batch requests are not supported (MCP removed batching in 2025-06-18); send one message per POST",
                None,
            ));
        }
        TopLevel::Other => {
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
                asks_task: params.contains_key("task"),
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

/// The members a JSON-RPC 2.0 message is read by; only these may not be given twice.
const ENVELOPE_MEMBERS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// A body's top level, read in one pass: an object's members (and whether one was given twice),
/// or what else it is. Values are read as `serde_json::Value`, so its nesting limit holds.
enum TopLevel {
    Object {
        members: Map<String, Value>,
        twice: bool,
    },
    Array,
    Other,
}

impl<'de> Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopLevelVisitor)
    }
}

struct TopLevelVisitor;

impl<'de> Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
        let mut members = Map::new();
        let mut twice = false;
        while let Some(key) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            if members.contains_key(&key) {
                // serde's derive, as rmcp uses it, skips members it does not know however often
                // they come, and refuses its own fields given twice
                twice |= ENVELOPE_MEMBERS.contains(&key.as_str());
            } else {
                members.insert(key, value);
            }
        }
        Ok(TopLevel::Object { members, twice })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TopLevel, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(TopLevel::Array)
    }

    fn visit_bool<E>(self, _: bool) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
    fn visit_str<E>(self, _: &str) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
    fn visit_unit<E>(self) -> Result<TopLevel, E> {
        Ok(TopLevel::Other)
    }
}

/// serde_json's message without echoing input, which may hold secrets.
fn describe_parse_error(err: &serde_json::Error) -> String {
    format!("line {}, column {}", err.line(), err.column())
}

#[cfg(test)]
#[path = "jsonrpc_proptests.rs"]
mod proptests;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::{EdgeError, RpcCode};
    use serde_json::json;

    const PARSE_ERROR: RpcCode = RpcCode::ParseError;
    const INVALID_REQUEST: RpcCode = RpcCode::InvalidRequest;

    fn code(body: &[u8]) -> Option<RpcCode> {
        check_message(body)
            .err()
            .map(|r| EdgeError::Rejected(r).code())
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
