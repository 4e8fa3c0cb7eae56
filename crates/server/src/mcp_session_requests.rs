//! Legacy sessions on the wire: `initialize` opens one (under the limits of [`McpSessions`]),
//! requests in it are answered by rmcp's stateless service (one service per request; JSON for a
//! plain answer, SSE once a call streams progress), `notifications/cancelled` cancels the named
//! call, `DELETE` closes it, and `GET` answers 405: the server never sends unsolicited messages,
//! which the streamable HTTP transport allows. rmcp's own session mode cost ~70 KiB and a worker
//! task per session and several channel hops per request.
//!
//! Every front end on one store serves every session: opening and closing write through to the
//! store's records, a session this process does not know, or has not checked for 5 s
//! (`mcp_sessions::REVALIDATE_AFTER`), is looked up there, and last uses are written back in
//! the background.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use toolgate_domain::{Account, AccountId};

use crate::error::EdgeError;
use crate::jsonrpc::MessageInfo;
use crate::mcp_sessions::{CallCancel, CallGuard, CallOrigin, Touch, WRITE_BACK_AFTER};
use crate::sse::Accepts;
use crate::{Shared, rmcp_forward};

/// The header naming a legacy session.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// How much longer than it looks open an idle record is kept before it is purged: a session
/// whose call outlasts the idle limit is renewed at its front end's next check, and must still
/// be there.
const PURGE_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// How idle a session's record may look and still be open: its last use reaches the store up
/// to [`WRITE_BACK_AFTER`] late.
fn record_idle(state: &Shared) -> std::time::Duration {
    state.sessions.idle() + WRITE_BACK_AFTER
}

/// Whether session `id` is `account`'s and open: from this process's table while it was
/// checked lately, else from the store's record (then cached). Unknown, closed, expired and
/// foreign sessions are all `SessionNotFound`, so ids cannot be probed.
pub async fn resolve(state: &Shared, account: &Account, id: &str) -> Result<(), EdgeError> {
    match state.sessions.touch(id, &account.id) {
        Touch::Served { write_back } => {
            if write_back {
                let (app, id) = (state.app.clone(), id.to_owned());
                tokio::spawn(async move {
                    if let Err(error) = app.mcp_sessions().touch(&id).await {
                        tracing::warn!(%error, "an MCP session's last use was not stored");
                    }
                });
            }
            Ok(())
        }
        Touch::Refused => Err(EdgeError::SessionNotFound),
        Touch::Check => {
            let owner = state
                .app
                .mcp_sessions()
                .owner(id, record_idle(state))
                .await?;
            admit(state, account, id, owner)
        }
        Touch::Recheck => {
            let owner = state.app.mcp_sessions().renew(id).await?;
            admit(state, account, id, owner)
        }
    }
}

/// Serves and caches session `id` when the store's `owner` is the caller; else drops it here.
fn admit(
    state: &Shared,
    account: &Account,
    id: &str,
    owner: Option<AccountId>,
) -> Result<(), EdgeError> {
    match owner {
        Some(owner) if owner == account.id => {
            state.sessions.adopt(id, &owner)?;
            if let Some(key) = account.via.named_key() {
                state.sessions.opened_with(id, &key.id);
            }
            Ok(())
        }
        _ => {
            state.sessions.forget(id);
            Err(EdgeError::SessionNotFound)
        }
    }
}

/// `initialize` of the older generation: answered by rmcp, and on success a session is opened
/// here and recorded in the store, whose count of the account's open sessions (every front
/// end's) is the per-account cap.
pub async fn open(state: &Shared, account: &Arc<Account>, parts: Parts, body: Bytes) -> Response {
    let id = match record_open(state, &account.id).await {
        Ok(id) => id,
        Err(err) => return err.respond(&state.metrics),
    };
    if let Some(key) = account.via.named_key() {
        state.sessions.opened_with(&id, &key.id);
    }
    let client = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|message| CallOrigin::client_of(message.pointer("/params/clientInfo")));
    state.sessions.set_client(&id, client);
    // inline JSON, so that 2025-11-25's `tasks` capability can be added to the answer
    let inline = Accepts { sse: false };
    let response = rmcp_forward::forward(state, account, parts, Body::from(body), inline).await;
    let mut response = crate::tasks_v1::with_tasks_capability(response).await;
    match HeaderValue::from_str(&id) {
        Ok(value) if response.status().is_success() => {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        _ => {
            state.sessions.close(&id, &account.id);
            if let Err(error) = state.app.mcp_sessions().close(&id, &account.id).await {
                tracing::warn!(%error, "a refused MCP session's record stays until it expires");
            }
        }
    }
    response
}

/// Opens a session here and records it, closing in the store whatever made room.
async fn record_open(state: &Shared, owner: &AccountId) -> Result<String, EdgeError> {
    let (id, evicted) = state.sessions.open_evicting(owner)?;
    let records = state.app.mcp_sessions();
    let recorded = async {
        if let Some(evicted) = &evicted {
            records.close(evicted, owner).await?;
        }
        records
            .open(&id, owner, state.sessions.per_account(), record_idle(state))
            .await
    };
    match recorded.await {
        Ok(replaced) => {
            if let Some(replaced) = replaced {
                state.sessions.forget(&replaced);
            }
        }
        Err(error) => {
            state.sessions.close(&id, owner);
            return Err(error.into());
        }
    }
    if state.sessions.purge_due() {
        let (app, idle) = (state.app.clone(), record_idle(state) + PURGE_GRACE);
        tokio::spawn(async move {
            if let Err(error) = app.mcp_sessions().purge(idle).await {
                tracing::warn!(%error, "old MCP session records were not purged");
            }
        });
    }
    Ok(id)
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
    parts.extensions.insert(CallOrigin {
        client: state.sessions.client(id),
        session: Some(id.into()),
    });
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

/// `DELETE` closes the session here and in the store (200, as the official SDKs' servers
/// answer; other front ends stop serving it within `REVALIDATE_AFTER`); `GET` is 405.
pub async fn other(state: &Shared, account: &Account, id: &str, method: &Method) -> Response {
    if *method == Method::DELETE {
        state.sessions.close(id, &account.id);
        return match state.app.mcp_sessions().close(id, &account.id).await {
            Ok(_) => Response::new(Body::empty()),
            Err(error) => EdgeError::from(error).respond(&state.metrics),
        };
    }
    EdgeError::NoGetStream.respond(&state.metrics)
}
