//! The plain HTTP routes (`/billing/status`, `/healthz`, `/metrics`, fallback) and the access log.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::EdgeError;
use crate::{Shared, credentials};

/// `GET /billing/status` with the key in `Authorization`, `X-Api-Key` or `?key=`.
pub async fn billing_status(State(state): State<Shared>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let account = match credentials::authenticate(&state.app, None, &parts).await {
        Ok(account) => account,
        Err(err) => return err.respond(&state.metrics),
    };
    match state.app.meter().status(&account, None).await {
        // axum answers 500 itself if serialising ever failed, rather than an empty 200.
        Ok(status) => axum::Json(status).into_response(),
        Err(err) => EdgeError::BillingStatus(err).respond(&state.metrics),
    }
}

/// `GET /healthz`: the process is up and serving.
pub async fn healthz() -> Response {
    json(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(state): State<Shared>) -> Response {
    let mut text = state.metrics.render();
    if let Some(log) = state.app.call_log() {
        history_dropped(&mut text, log.dropped());
    }
    let mut response = text.into_response();
    let kind = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    response.headers_mut().insert(header::CONTENT_TYPE, kind);
    response
}

/// Adds the call history's dropped records (its queue was full) to the exposition, before its
/// end marker.
fn history_dropped(text: &mut String, dropped: u64) {
    let end = text.strip_suffix("# EOF\n").map(str::len);
    let tail = end.map(|at| text.split_off(at));
    text.push_str(
        "# HELP toolgate_history_dropped Call history records dropped because the writer's queue was full.\n\
         # TYPE toolgate_history_dropped counter\n",
    );
    text.push_str(&format!("toolgate_history_dropped_total {dropped}\n"));
    text.push_str(tail.as_deref().unwrap_or_default());
}

/// Anything else: 404 with a pointer to the endpoints.
pub async fn not_found() -> Response {
    let body = r#"{"error":"not found: the MCP endpoint is POST /u/<api_key> (or POST / with the key in a header); see also GET /billing/status, /healthz, /metrics"}"#;
    json(StatusCode::NOT_FOUND, body.to_owned())
}

/// A JSON answer with `status`.
pub(crate) fn json(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Counts and logs every request; the logged path never contains a key.
pub async fn access_log(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = route_label(request.extensions().get::<MatchedPath>());
    let method = method_label(request.method());
    let shown = credentials::redact(request.uri().path(), request.uri().query());
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state
        .metrics
        .request(route, method, status, elapsed.as_secs_f64());
    tracing::info!(target: "toolgate::access", method, path = %shown, status, micros = elapsed.as_micros() as u64);
    response
}

fn route_label(matched: Option<&MatchedPath>) -> &'static str {
    match matched.map(MatchedPath::as_str) {
        Some("/u/{api_key}") => "/u/{api_key}",
        Some("/") => "/",
        Some("/mcp") => "/mcp",
        Some("/billing/status") => "/billing/status",
        Some("/healthz") => "/healthz",
        Some("/metrics") => "/metrics",
        Some(path) if path.starts_with("/files/") => "/files",
        Some("/magic-link") => "/magic-link",
        Some(path) if path.starts_with("/.well-known/") => "/.well-known",
        Some(path) if path.starts_with("/oauth/") => "/oauth",
        Some("/billing/stripe/webhook") => "/billing/stripe/webhook",
        Some(path) if path.starts_with("/dashboard") => "/dashboard",
        _ => "other",
    }
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PUT => "PUT",
        _ => "other",
    }
}
