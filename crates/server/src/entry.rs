//! The MCP endpoints' front door, in the order a request meets it: Origin, key, session owner,
//! body (size, JSON, JSON-RPC shape), then rmcp. Every refusal here is a JSON-RPC error body with
//! the contract's HTTP status, and nothing reaches rmcp unauthenticated.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use axum::response::Response;
use http_body_util::BodyExt;
use toolgate_domain::Account;

use crate::error::EdgeError;
use crate::mcp_session_requests::{self, SESSION_HEADER};
use crate::tools_call::ServerTiming;
use crate::{Shared, credentials, rmcp_forward, sse};
use toolgate_app::stages::{Stage, Stages};

/// What a caller presents at an MCP endpoint: an API key (from its carrier) or, at `/mcp`, an
/// OAuth access token. Either resolves to an account; everything after that is one path.
enum Credential {
    /// A key in the path (`Some`) or in a header or the query.
    Key(Option<String>),
    /// An OAuth access token in `Authorization: Bearer`.
    Token,
}

/// `POST|GET|DELETE /u/{api_key}`: the personal URL.
pub async fn personal(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> Response {
    entry(&state, Credential::Key(Some(key)), request).await
}

/// `POST|GET|DELETE /`: the key in a header or the query.
pub async fn base(State(state): State<Shared>, request: Request) -> Response {
    entry(&state, Credential::Key(None), request).await
}

/// `/mcp`: the same MCP endpoint for an OAuth access token (chat clients' connectors).
pub async fn oauth(State(state): State<Shared>, request: Request) -> Response {
    entry(&state, Credential::Token, request).await
}

async fn authenticate(
    state: &Shared,
    credential: Credential,
    parts: &Parts,
) -> Result<Account, EdgeError> {
    match credential {
        Credential::Key(path_key) => credentials::authenticate(&state.app, path_key, parts).await,
        Credential::Token => {
            let oauth = state.app.oauth();
            let bearer = credentials::bearer(&parts.headers);
            match oauth.authenticate(bearer.as_deref()).await {
                Ok((account, _grant)) => Ok(account),
                Err(error) => Err(EdgeError::Token {
                    challenge: oauth.challenge(error.challenge_error()),
                    error,
                }),
            }
        }
    }
}

async fn entry(state: &Shared, credential: Credential, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let clock = state.server_timing.then(Stages::start);
    if !state.origins.permits(&parts.headers) {
        return EdgeError::ForbiddenOrigin.respond(&state.metrics);
    }
    let account = match authenticate(state, credential, &parts).await {
        Ok(account) => {
            mark(clock.as_deref(), Stage::Authenticated);
            Arc::new(account)
        }
        Err(err) => {
            // A refused request's small body is read before answering, so the connection stays
            // usable: an OAuth client retries on it at once with its new token, and an unread
            // body makes the server close it under the retry ("disconnected without a response").
            let _ = read_limited(body, REFUSED_BODY_READ).await;
            return err.respond(&state.metrics);
        }
    };
    let session = match parts.headers.get(SESSION_HEADER) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(id) => match mcp_session_requests::resolve(state, &account, id).await {
                Ok(()) => Some(id.to_owned()),
                Err(err) => return err.respond(&state.metrics),
            },
            // Another account's session looks exactly like an unknown one: ids cannot be probed.
            Err(_) => return EdgeError::SessionNotFound.respond(&state.metrics),
        },
    };
    if parts.method != Method::POST {
        return match &session {
            Some(id) => mcp_session_requests::other(state, &account, id, &parts.method).await,
            None => {
                rmcp_forward::forward(state, &account, parts, body, sse::Accepts { sse: true })
                    .await
            }
        };
    }
    let bytes = match read_limited(body, state.max_body).await {
        Ok(bytes) => bytes,
        Err(err) => return err.respond(&state.metrics),
    };
    let info = match crate::jsonrpc::check_message(&bytes) {
        Ok(info) => info,
        Err(rejection) => return EdgeError::from(rejection).respond(&state.metrics),
    };
    if let Some(stages) = clock {
        stages.mark(Stage::Read);
        parts.extensions.insert(ServerTiming(stages));
    }
    // The body is JSON: say so, whatever the client sent (curl -d sends form encoding).
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let accepts = sse::negotiate(&mut parts.headers);
    if let Some(answer) = crate::tasks_v1::claims(state, &account, &bytes, &info).await {
        return answer;
    }
    // the list rendered once is everybody's but a key's restricted to some tools (rmcp's)
    if let Some(answer) = state
        .tools_list
        .as_ref()
        .filter(|_| state.app.calls().may_call_all(&account))
        .and_then(|l| l.answer(&parts, &info))
    {
        return answer;
    }
    if session.is_none()
        && let Some(answer) = crate::stateless::answer(state, &account, &parts, &bytes, &info).await
    {
        return answer;
    }
    match session {
        Some(id) => {
            mcp_session_requests::post(state, &account, &id, parts, bytes, &info, accepts).await
        }
        None if info.opens_session() => {
            mcp_session_requests::open(state, &account, parts, bytes).await
        }
        None => match crate::tools_call::answer(state, &account, &parts, &bytes, &info).await {
            Some(answer) => answer,
            None => rmcp_forward::forward(state, &account, parts, Body::from(bytes), accepts).await,
        },
    }
}

fn mark(clock: Option<&Stages>, stage: Stage) {
    if let Some(stages) = clock {
        stages.mark(stage);
    }
}

/// How much of a refused request's body is read to keep its connection; a larger body closes it.
const REFUSED_BODY_READ: usize = 64 * 1024;

async fn read_limited(body: Body, limit: usize) -> Result<Bytes, EdgeError> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            Err(EdgeError::TooLarge { limit })
        }
        Err(_) => Err(EdgeError::UnreadableBody),
    }
}
