#![allow(clippy::unwrap_used)]

use axum::body::to_bytes;
use serde_json::Value;
use toolgate_store::StoreError;

use super::*;

/// A source detail that must reach the log only, never the caller.
const DETAIL: &str = "connection to db-7.internal:5432 refused";

fn unavailable() -> StoreError {
    StoreError::Unavailable(DETAIL.to_owned())
}

async fn answered(error: EdgeError) -> (StatusCode, Value, Metrics) {
    let metrics = Metrics::new();
    let response = error.respond(&metrics);
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap(), metrics)
}

#[tokio::test]
async fn every_refusal_has_its_status_code_and_metric_in_one_place() {
    let cases: Vec<(EdgeError, u16, i64)> = vec![
        (EdgeError::ForbiddenOrigin, 403, -32600),
        (EdgeError::Auth(AuthError::Rejected), 401, -32001),
        (EdgeError::Auth(AuthError::Missing), 401, -32001),
        (
            EdgeError::Auth(AuthError::Unavailable(unavailable())),
            503,
            -32603,
        ),
        (
            EdgeError::Token {
                error: toolgate_oauth::TokenError::Invalid,
                challenge: "Bearer".into(),
            },
            401,
            -32001,
        ),
        (
            EdgeError::Token {
                error: toolgate_oauth::TokenError::InsufficientScope,
                challenge: "Bearer".into(),
            },
            403,
            -32001,
        ),
        (EdgeError::SessionNotFound, 404, -32600),
        (
            EdgeError::SessionsFull(OpenError::AccountFull(64)),
            429,
            -32600,
        ),
        (
            EdgeError::SessionsFull(OpenError::ServerFull(9)),
            503,
            -32600,
        ),
        (EdgeError::NoGetStream, 405, -32600),
        (EdgeError::TooLarge { limit: 10 }, 413, -32600),
        (EdgeError::UnreadableBody, 400, -32600),
        (
            EdgeError::Rejected(Rejection::NotJson("x".into())),
            400,
            -32700,
        ),
        (
            EdgeError::Rejected(Rejection::NotJsonRpc("no", Some(Value::from(7)))),
            400,
            -32600,
        ),
        (
            EdgeError::Transport {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: "Unsupported".into(),
            },
            415,
            -32600,
        ),
        (
            EdgeError::BillingStatus(MeterError::Unavailable(unavailable())),
            503,
            -32603,
        ),
    ];
    for (error, status, code) in cases {
        let shown = error.to_string();
        let (got_status, body, metrics) = answered(error).await;
        assert_eq!(got_status.as_u16(), status, "{shown}");
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], code, "{shown}");
        let message = body["error"]["message"].as_str().unwrap();
        assert_eq!(message, shown);
        assert!(
            !message.is_empty() && !message.contains(DETAIL),
            "{message}"
        );
        let counted = format!(r#"toolgate_jsonrpc_errors_total{{code="{code}"}} 1"#);
        assert!(metrics.render().contains(&counted), "{shown}: not counted");
    }
}

#[tokio::test]
async fn the_request_id_is_echoed_when_it_was_readable_and_headers_say_what_to_do() {
    let (_, body, _) = answered(EdgeError::Rejected(Rejection::NotJsonRpc(
        "no",
        Some(Value::from(7)),
    )))
    .await;
    assert_eq!(body["id"], 7);
    let metrics = Metrics::new();
    let oauth = EdgeError::Token {
        error: toolgate_oauth::TokenError::Missing,
        challenge: "Bearer resource_metadata=\"https://svc.example/.well-known/oauth-protected-resource/mcp\"".into(),
    }
    .respond(&metrics);
    let challenge = oauth.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    let get = EdgeError::NoGetStream.respond(&metrics);
    assert_eq!(get.headers()[header::ALLOW], "POST, DELETE");
}

#[test]
fn a_call_without_a_tool_answer_maps_to_its_code_and_keeps_its_source_private() {
    let refused = call_error(&CallError::Refused("top up".into()));
    assert_eq!(refused.code.0, -32002);
    assert_eq!(refused.message, "top up");
    let lost = call_error(&CallError::NotRecorded(MeterError::Unavailable(
        unavailable(),
    )));
    assert_eq!(lost.code.0, -32603);
    assert!(!lost.message.contains(DETAIL), "{}", lost.message);
    assert_eq!(call_error(&CallError::UnknownTool).code.0, -32601);
}
