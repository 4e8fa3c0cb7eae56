//! Legacy sessions on the wire: `initialize` opens one (under the limits of [`McpSessions`]),
//! requests in it are answered by rmcp's stateless service (one service per request; JSON for a
//! plain answer, SSE once a call streams progress), `notifications/cancelled` cancels the named
//! call, `DELETE` closes it, and `GET` answers 405: the server never sends unsolicited messages,
//! which the streamable HTTP transport allows. rmcp's own session mode cost ~70 KiB and a worker
//! task per session and several channel hops per request.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use toolgate_domain::Account;

use crate::error::EdgeError;
use crate::jsonrpc::MessageInfo;
use crate::mcp_sessions::{CallCancel, CallGuard};
use crate::sse::Accepts;
use crate::{Shared, rmcp_forward};

/// The header naming a legacy session.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// `initialize` of the older generation: answered by rmcp, and on success a session is opened.
pub async fn open(
    state: &Shared,
    account: &Arc<Account>,
    parts: Parts,
    body: Bytes,
    accepts: Accepts,
) -> Response {
    let id = match state.sessions.open(&account.id) {
        Ok(id) => id,
        Err(err) => return EdgeError::from(err).respond(&state.metrics),
    };
    let mut response =
        rmcp_forward::forward(state, account, parts, Body::from(body), accepts).await;
    match HeaderValue::from_str(&id) {
        Ok(value) if response.status().is_success() => {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        _ => {
            state.sessions.close(&id, &account.id);
        }
    }
    response
}

/// A POST in session `id` (already known to be the caller's).
pub async fn post(
    state: &Shared,
    account: &Arc<Account>,
    id: &str,
    mut parts: Parts,
    body: Bytes,
    info: &MessageInfo,
    accepts: Accepts,
) -> Response {
    let Some(request_id) = &info.id else {
        if info.method.as_deref() == Some("notifications/cancelled")
            && let Some(cancelled) = &info.cancels
        {
            state
                .sessions
                .cancel(id, &account.id, &cancelled.to_string());
        }
        // notifications and answers to requests (we send none) need nothing more
        return accepted();
    };
    parts.headers.remove(SESSION_HEADER);
    let call = state.sessions.begin_call(id, request_id.to_string());
    if let Some(call) = &call {
        parts.extensions.insert(CallCancel(call.token().clone()));
    }
    let response = match crate::tools_call::answer(state, account, &parts, &body, info).await {
        Some(answer) => answer,
        None => rmcp_forward::forward(state, account, parts, Body::from(body), accepts).await,
    };
    match call {
        Some(call) => withheld_if_cancelled(response, call, accepts),
        None => response,
    }
}

/// A cancelled call gets no answer (the spec: the receiver SHOULD NOT respond), where the
/// client can take none: an SSE client gets an empty stream, or its stream ends before the
/// next event. A JSON-only client still gets the JSON answer, as it has no other.
fn withheld_if_cancelled(response: Response, call: CallGuard, accepts: Accepts) -> Response {
    if !accepts.sse {
        return response;
    }
    if call.token().is_cancelled() {
        return empty_stream();
    }
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return response;
    }
    let (parts, body) = response.into_parts();
    let token = call.token().clone();
    let frames = body
        .into_data_stream()
        .take_until(async move { token.cancelled_owned().await })
        .map(move |frame| {
            let _held = &call;
            frame
        });
    Response::from_parts(parts, Body::from_stream(frames))
}

fn empty_stream() -> Response {
    let mut response = Response::new(Body::empty());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn accepted() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// `DELETE` closes the session (200, as the official SDKs' servers answer); `GET` is 405.
pub fn other(state: &Shared, account: &Account, id: &str, method: &Method) -> Response {
    if *method == Method::DELETE {
        state.sessions.close(id, &account.id);
        return Response::new(Body::empty());
    }
    EdgeError::NoGetStream.respond(&state.metrics)
}
