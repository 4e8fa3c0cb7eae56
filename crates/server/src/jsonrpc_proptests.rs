//! Property tests of the JSON-RPC pre-check: arbitrary bytes never panic; a body is refused as
//! not JSON (-32700) exactly when serde_json cannot parse it; and it is accepted exactly when
//! serde_json reads it, with typed fields (a field given twice is an error, as in rmcp's own
//! typed parse), as one JSON-RPC 2.0 request, notification or response.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Rejection, check_message};

/// A member as present (even when `null`) or absent.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The JSON-RPC 2.0 envelope, as serde reads it into typed fields.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// The oracle: one JSON-RPC 2.0 message with a string or integer id (or none), as MCP sends.
fn valid(body: &[u8]) -> bool {
    let Ok(envelope) = serde_json::from_slice::<Envelope>(body) else {
        return false;
    };
    let id_ok = match &envelope.id {
        None | Some(Value::String(_)) => true,
        Some(Value::Number(n)) => n.as_i64().is_some() || n.as_u64().is_some(),
        Some(_) => false,
    };
    let version_ok = envelope.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0");
    let request = matches!(&envelope.method, Some(Value::String(m)) if !m.is_empty())
        && matches!(envelope.params, None | Some(Value::Object(_)));
    let response = envelope.method.is_none()
        && envelope.id.is_some()
        && (envelope.result.is_some() || envelope.error.is_some());
    id_ok && version_ok && (request || response)
}

/// Values a member may take: right, wrong and in between.
fn member_value() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "\"2.0\"",
        "\"1.0\"",
        "2.0",
        "1",
        "-7",
        "18446744073709551615",
        "1.5",
        "1e3",
        "null",
        "true",
        "\"\"",
        "\"tools/list\"",
        "\"initialize\"",
        "{}",
        "[]",
        "[1]",
        r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
        r#"{"requestId":3}"#,
        r#"{"a":{"b":[1,2,{"c":null}]}}"#,
        "\"\\u00e9\\n\"",
    ])
    .prop_map(str::to_owned)
}

/// An object of members from the envelope's names (and others), possibly repeated.
fn message() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(vec![
                "jsonrpc", "id", "method", "params", "result", "error", "x", "ID",
            ]),
            member_value(),
        ),
        0..7,
    )
    .prop_map(|members| {
        let inner: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", inner.join(","))
    })
}

/// A valid request with `[` nested `depth` deep in its arguments.
fn nested(depth: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"svc_read","arguments":{{"x":{}{}}}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

fn check_against_oracle(body: &[u8]) -> Result<(), TestCaseError> {
    let verdict = check_message(body);
    let is_json = serde_json::from_slice::<Value>(body).is_ok();
    prop_assert_eq!(
        matches!(verdict, Err(Rejection::NotJson(_))),
        !is_json,
        "{:?}",
        String::from_utf8_lossy(body)
    );
    prop_assert_eq!(
        verdict.is_ok(),
        valid(body),
        "{:?}: {:?}",
        String::from_utf8_lossy(body),
        verdict
    );
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_agree_with_serde_json(
        body in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        check_against_oracle(&body)?;
    }

    #[test]
    fn the_verdict_on_messages_is_the_oracles(body in message()) {
        check_against_oracle(body.as_bytes())?;
    }

    #[test]
    fn nesting_is_judged_as_serde_json_judges_it(depth in 0usize..300, cut in any::<bool>()) {
        let mut body = nested(depth);
        if cut {
            body.pop();
        }
        check_against_oracle(body.as_bytes())?;
    }
}

/// The case the properties found: a member given twice was taken by its last value, where
/// rmcp's typed parse refuses it (and answered 415 with serde's words).
#[test]
fn a_member_given_twice_is_an_invalid_request() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"x"}"#,
        r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
    ] {
        assert!(
            matches!(
                check_message(body.as_bytes()),
                Err(Rejection::NotJsonRpc(_, None))
            ),
            "{body}"
        );
    }
}

/// The second case the properties found (in CI): a member the envelope does not know, given
/// twice, is skipped by a typed parse as it is given once, so the message stands.
#[test]
fn an_unknown_member_given_twice_is_skipped() {
    let body = r#"{"ID":"2.0","jsonrpc":"2.0","id":1,"ID":"2.0","method":"tools/list"}"#;
    assert!(check_message(body.as_bytes()).is_ok());
    assert!(valid(body.as_bytes()));
}

/// 10^6 levels, as a whole body and deep in a field of an otherwise valid request: not JSON
/// to serde_json (its nesting limit), refused, and no stack is spent on it.
#[test]
fn a_body_nested_a_million_deep_is_not_json() {
    let deep = 1_000_000;
    for body in [
        "[".repeat(deep),
        format!("{}{}", "[".repeat(deep), "]".repeat(deep)),
        "{\"a\":".repeat(deep),
        nested(deep),
    ] {
        assert!(
            matches!(check_message(body.as_bytes()), Err(Rejection::NotJson(_))),
            "{}",
            &body[..20]
        );
    }
}
