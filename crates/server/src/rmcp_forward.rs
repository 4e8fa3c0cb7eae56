//! Handing a request to rmcp's stateless service, which answers every MCP request this server
//! does not answer itself, and shaping rmcp's answer for the caller.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::http::request::Parts;
use axum::response::Response;
use http_body_util::BodyExt;
use toolgate_domain::Account;

use crate::error::EdgeError;
use crate::handler::Caller;
use crate::{Metrics, Shared, sse};

/// Hands a request to rmcp's stateless service, as `account`, and shapes its answer for the
/// caller (a JSON-RPC error body for transport refusals; inline JSON for JSON-only callers).
pub async fn forward(
    state: &Shared,
    account: &Arc<Account>,
    mut parts: Parts,
    body: Body,
    accepts: sse::Accepts,
) -> Response {
    parts.extensions.insert(Caller(account.clone()));
    let response = state
        .mcp
        .handle(Request::from_parts(parts, body))
        .await
        .map(Body::new);
    let response = as_jsonrpc_error(response, &state.metrics).await;
    sse::inline_if_needed(response, accepts).await
}

/// rmcp answers transport refusals (unknown session, missing session id, wrong Host) in plain
/// text; callers get the same JSON-RPC error body as for every other refusal, status unchanged.
async fn as_jsonrpc_error(response: Response, metrics: &Metrics) -> Response {
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !response.status().is_client_error() || !plain {
        return response;
    }
    let status = response.status();
    let text = match http_body_util::Limited::new(response.into_body(), 4096)
        .collect()
        .await
    {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    EdgeError::Transport { status, message }.respond(metrics)
}
