//! HTTP and MCP: the axum router, the front door in front of rmcp (origin, key, body checks),
//! the rmcp handler over the capability registry, metrics and a redacted access log.

mod answer;
mod connections;
mod credentials;
mod entry;
mod error;
mod files;
#[cfg(feature = "conformance-fixtures")]
mod fixtures;
#[cfg(feature = "conformance-fixtures")]
mod fixtures_tasks;
mod handler;
pub mod jsonrpc;
mod mcp_session_requests;
mod mcp_sessions;
pub mod metrics;
mod oauth;
mod origin;
mod proxies;
mod rmcp_forward;
mod routes;
mod sse;
mod stateless;
mod task_calls;
mod task_wire;
mod tasks_v1;
mod tasks_v2;
mod tools_call;
mod tools_list;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use toolgate_app::App;

pub use connections::{ConnectionLimits, serve};
pub use handler::{Caller, McpHandler};
pub use mcp_sessions::McpSessionLimits;
pub use metrics::Metrics;
pub use origin::Origins;
pub use proxies::Network;

/// HTTP settings the operator controls.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The externally visible base URL; its origin and host are allowed.
    pub public_url: String,
    /// Further browser origins allowed to call (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Further `Host` values accepted (reverse proxies with several names).
    pub allowed_hosts: Vec<String>,
    /// Largest request body accepted, in bytes.
    pub max_request_bytes: usize,
    /// Legacy MCP sessions: how many, and for how long idle.
    pub sessions: McpSessionLimits,
    /// Reverse proxies whose `X-Forwarded-For` names the client (empty: the TCP peer is).
    pub trusted_proxies: Vec<Network>,
    /// Tool calls answer with a `Server-Timing` header: how long each stage took, nothing else.
    pub server_timing: bool,
}

/// State shared by every handler.
#[derive(Clone)]
pub(crate) struct Shared(Arc<ServerState>);

pub(crate) struct ServerState {
    app: App,
    metrics: Arc<Metrics>,
    origins: Origins,
    max_body: usize,
    /// Answer tool calls with their stages' durations (`Server-Timing`).
    server_timing: bool,
    sessions: Arc<mcp_sessions::McpSessions>,
    /// A plain legacy `tools/list`, answered without rmcp.
    tools_list: Option<tools_list::ToolsList>,
    /// A plain 2026-07-28 `tools/list` or `tools/call`, answered without rmcp.
    stateless: Option<stateless::Stateless>,
    /// The handler rmcp calls, also for plain legacy `tools/call`s answered without rmcp.
    handler: McpHandler,
    /// rmcp in stateless mode answers every request; legacy sessions are ours (see `mcp_session_requests`).
    mcp: StreamableHttpService<McpHandler, LocalSessionManager>,
}

impl std::ops::Deref for Shared {
    type Target = ServerState;
    fn deref(&self) -> &ServerState {
        &self.0
    }
}

/// Builds the whole HTTP surface. `shutdown` ends open MCP streams when the server stops; the
/// app's OAuth authorization server serves `/mcp` and its discovery, registration and token
/// endpoints.
pub fn router(
    app: App,
    settings: &HttpSettings,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Router {
    let origins = Origins::new(&settings.public_url, &settings.allowed_origins);
    let handler = McpHandler::new(app.clone(), metrics.clone());
    let config = rmcp_config(settings, &origins, shutdown);
    let tools_list = tools_list::ToolsList::new(&handler, &config.allowed_hosts);
    let stateless = stateless::Stateless::new(handler.tool_list());
    let config = config
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let for_rmcp = handler.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(for_rmcp.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let sessions = mcp_sessions::McpSessions::new(settings.sessions);
    let dashboard = toolgate_dashboard::router(
        app.clone(),
        toolgate_dashboard::DashboardSettings {
            public_url: settings.public_url.clone(),
            on_key_rotated: key_rotated(&sessions, &app),
            on_key_revoked: key_revoked(&sessions, &app),
        },
    );
    let shared = Shared(Arc::new(ServerState {
        app,
        metrics,
        origins,
        max_body: settings.max_request_bytes,
        server_timing: settings.server_timing,
        sessions,
        tools_list,
        stateless,
        handler,
        mcp,
    }));
    Router::new()
        .route("/u/{api_key}", any(entry::personal))
        .route("/", any(entry::base))
        .route("/mcp", any(entry::oauth))
        .route(
            "/.well-known/oauth-protected-resource",
            get(oauth::resource_metadata).options(oauth::preflight),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(oauth::resource_metadata).options(oauth::preflight),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(oauth::server_metadata).options(oauth::preflight),
        )
        .route(
            "/.well-known/openid-configuration",
            get(oauth::server_metadata).options(oauth::preflight),
        )
        .route(
            "/oauth/register",
            post(oauth::register).options(oauth::preflight),
        )
        .route("/oauth/token", post(oauth::token).options(oauth::preflight))
        .route(
            "/oauth/revoke",
            post(oauth::revoke).options(oauth::preflight),
        )
        .route("/billing/status", get(routes::billing_status))
        .route("/files/{link}", get(files::download).put(files::upload))
        .route(
            "/files/{link}/{name}",
            get(files::download).put(files::upload),
        )
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(routes::metrics))
        .fallback(routes::not_found)
        .with_state(shared.clone())
        .merge(dashboard)
        .layer(axum::middleware::from_fn_with_state(
            shared,
            routes::access_log,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(settings.trusted_proxies.clone()),
            proxies::real_client,
        ))
}

/// The client's address, as the accept loop recorded it.
pub(crate) fn client_ip(request: &axum::extract::Request) -> std::net::IpAddr {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(
            std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            |info| info.0.ip(),
        )
}

/// What the dashboard calls after a rotation: the old key's open MCP sessions end at once
/// (their next request would be refused anyway; this also cancels calls in flight), here at
/// once and in the store just after, so other front ends stop serving them too.
fn key_rotated(
    sessions: &Arc<mcp_sessions::McpSessions>,
    app: &App,
) -> Arc<dyn Fn(&toolgate_domain::AccountId) + Send + Sync> {
    let sessions = Arc::clone(sessions);
    let app = app.clone();
    Arc::new(move |account| {
        let closed = sessions.close_all(account);
        if closed > 0 {
            tracing::info!(closed, "key rotated: its MCP sessions were closed");
        }
        let (app, account) = (app.clone(), account.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = app.mcp_sessions().close_all(&account).await {
                    tracing::warn!(%error, "a rotated key's MCP session records stay open until they expire");
                }
            });
        }
    })
}

/// What the dashboard calls after revoking a named key: the MCP sessions opened with it end at
/// once, here and in the store, as a rotation ends the first key's; the account's other
/// sessions stay open. Front ends that hold such a session refuse its next request anyway: the
/// key no longer authenticates.
fn key_revoked(
    sessions: &Arc<mcp_sessions::McpSessions>,
    app: &App,
) -> toolgate_dashboard::KeyRevoked {
    let sessions = Arc::clone(sessions);
    let app = app.clone();
    Arc::new(move |account, key| {
        let closed = sessions.close_key(account, key);
        let (app, account) = (app.clone(), account.clone());
        // awaited by the revoke's answer: a durable record left open a moment longer would let
        // the account's other key carry the session on from another front end (or this one)
        Box::pin(async move {
            if closed.is_empty() {
                return;
            }
            tracing::info!(
                closed = closed.len(),
                "key revoked: its MCP sessions were closed"
            );
            for id in closed {
                if let Err(error) = app.mcp_sessions().close(&id, &account).await {
                    tracing::warn!(%error, "a revoked key's MCP session record stays open until it expires");
                }
            }
        })
    })
}

fn rmcp_config(
    settings: &HttpSettings,
    origins: &Origins,
    shutdown: CancellationToken,
) -> StreamableHttpServerConfig {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    if let Ok(uri) = settings.public_url.parse::<http::Uri>()
        && let Some(authority) = uri.authority()
    {
        hosts.push(authority.host().to_owned());
        hosts.push(authority.as_str().to_owned());
    }
    hosts.extend(settings.allowed_hosts.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins.list())
        .with_max_request_body_bytes(settings.max_request_bytes)
        .with_cancellation_token(shutdown)
}
