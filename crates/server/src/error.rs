//! The one place where a failure becomes what the caller sees: the HTTP status, the JSON-RPC
//! code, the message, the metric, and the log line of its source (which is never sent).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use toolgate_app::{AuthError, CallError, MeterError};

use crate::jsonrpc::Rejection;
use crate::mcp_sessions::OpenError;
use crate::metrics::Metrics;

/// The JSON-RPC error codes this service answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcCode {
    /// The body is not JSON.
    ParseError,
    /// JSON, but not a JSON-RPC message (or a transport refusal).
    InvalidRequest,
    /// Not a method or tool this server offers.
    MethodNotFound,
    /// A parameter names nothing the caller has (an unknown or expired task).
    InvalidParams,
    /// Something on our side failed.
    InternalError,
    /// No valid credential.
    Unauthenticated,
    /// The allowance is used up and the wallet cannot pay.
    PaymentRequired,
}

impl RpcCode {
    /// The code's number on the wire.
    pub const fn number(self) -> i32 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::InternalError => -32603,
            Self::Unauthenticated => -32001,
            Self::PaymentRequired => -32002,
        }
    }
}

impl From<RpcCode> for ErrorCode {
    fn from(code: RpcCode) -> Self {
        ErrorCode(code.number())
    }
}

/// Every refusal the front door answers itself, before or around rmcp.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The browser's Origin is not allowed.
    #[error(
        "Forbidden: this Origin may not call the service (add it to the allowed_origins setting)"
    )]
    ForbiddenOrigin,
    /// No valid key (401), or the key store failed (503).
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// A missing or refused OAuth access token at `/mcp` (401 with the challenge).
    #[error("{error}")]
    Token {
        /// Why it was refused.
        error: toolgate_oauth::TokenError,
        /// The `WWW-Authenticate` value: where the resource metadata is, which scope to ask.
        challenge: String,
    },
    /// An unknown, closed or foreign MCP session.
    #[error("Session not found: it was closed or expired; send initialize again")]
    SessionNotFound,
    /// No more MCP sessions for this account (429) or on this server (503).
    #[error(transparent)]
    SessionsFull(#[from] OpenError),
    /// The store of MCP sessions could not be reached.
    #[error("MCP sessions are temporarily unavailable; please retry")]
    SessionStore(#[from] toolgate_app::McpSessionError),
    /// `GET` in a session: we send nothing unsolicited.
    #[error(
        "Method Not Allowed: this server sends no unsolicited messages, so it offers no GET stream; answers arrive on each POST"
    )]
    NoGetStream,
    /// The body is over the limit.
    #[error("Request body too large: the limit is {limit} bytes (setting max_request_bytes)")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body could not be read (the client went away mid-body).
    #[error("the request body could not be read")]
    UnreadableBody,
    /// Not JSON, or not JSON-RPC.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// rmcp refused at the transport (its message kept, its status kept).
    #[error("{message}")]
    Transport {
        /// rmcp's status.
        status: StatusCode,
        /// rmcp's text.
        message: String,
    },
    /// The billing status could not be read.
    #[error("billing status is temporarily unavailable; please retry")]
    BillingStatus(#[source] MeterError),
}

impl EdgeError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::Auth(AuthError::Unavailable(_))
            | Self::BillingStatus(_)
            | Self::SessionStore(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Token {
                error: toolgate_oauth::TokenError::Unavailable,
                ..
            } => StatusCode::SERVICE_UNAVAILABLE,
            // RFC 6750 §3.1: a valid token without the scope is forbidden, not unauthenticated
            Self::Token {
                error: toolgate_oauth::TokenError::InsufficientScope,
                ..
            } => StatusCode::FORBIDDEN,
            Self::Auth(_) | Self::Token { .. } => StatusCode::UNAUTHORIZED,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::SessionsFull(OpenError::AccountFull(_)) => StatusCode::TOO_MANY_REQUESTS,
            Self::SessionsFull(OpenError::ServerFull(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::NoGetStream => StatusCode::METHOD_NOT_ALLOWED,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnreadableBody | Self::Rejected(_) => StatusCode::BAD_REQUEST,
            Self::Transport { status, .. } => *status,
        }
    }

    /// The JSON-RPC code.
    pub fn code(&self) -> RpcCode {
        match self {
            Self::Auth(AuthError::Unavailable(_))
            | Self::BillingStatus(_)
            | Self::SessionStore(_) => RpcCode::InternalError,
            Self::Token {
                error: toolgate_oauth::TokenError::Unavailable,
                ..
            } => RpcCode::InternalError,
            Self::Auth(_) | Self::Token { .. } => RpcCode::Unauthenticated,
            Self::Rejected(Rejection::NotJson(_)) => RpcCode::ParseError,
            Self::ForbiddenOrigin
            | Self::SessionNotFound
            | Self::SessionsFull(_)
            | Self::NoGetStream
            | Self::TooLarge { .. }
            | Self::UnreadableBody
            | Self::Rejected(Rejection::NotJsonRpc(..))
            | Self::Transport { .. } => RpcCode::InvalidRequest,
        }
    }

    /// The response: counted, its source logged, its body the JSON-RPC error.
    pub fn respond(self, metrics: &Metrics) -> Response {
        log_source(&self);
        let (status, code) = (self.status(), self.code());
        metrics.rpc_error(i64::from(code.number()));
        let id = match &self {
            Self::Rejected(Rejection::NotJsonRpc(_, id)) => id.clone(),
            _ => None,
        };
        let mut response = error_response(status, code, &self.to_string(), id);
        let headers = response.headers_mut();
        match self {
            Self::Token { challenge, .. } => {
                if let Ok(value) = HeaderValue::from_str(&challenge) {
                    headers.insert(header::WWW_AUTHENTICATE, value);
                }
            }
            Self::NoGetStream => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            }
            _ => {}
        }
        response
    }
}

/// Logs what failed on our side, with its source chain; refusals of the caller are not logged.
fn log_source(error: &(dyn std::error::Error + 'static)) {
    let Some(source) = error.source() else {
        return;
    };
    let mut chain = source.to_string();
    let mut next = source.source();
    while let Some(cause) = next {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        next = cause.source();
    }
    tracing::error!(error = %error, source = %chain, "request failed on our side");
}

/// An error the MCP layer answers with.
pub fn mcp_error(code: RpcCode, message: impl Into<String>) -> McpError {
    McpError::new(ErrorCode::from(code), message.into(), None)
}

/// A task that could not be made or read, as the MCP layer answers it (a store failure logged).
pub fn task_error(err: &toolgate_app::tasks::TaskError) -> McpError {
    use toolgate_app::tasks::TaskError;
    match err {
        TaskError::TooMany(_) => mcp_error(RpcCode::InvalidRequest, err.to_string()),
        TaskError::Store(source) => {
            tracing::error!(error = %source, "the task records could not be reached");
            mcp_error(RpcCode::InternalError, err.to_string())
        }
    }
}

/// `tasks/*` naming a task the caller does not have (unknown, another account's, expired).
pub fn no_such_task() -> McpError {
    mcp_error(
        RpcCode::InvalidParams,
        "Failed to retrieve task: no such task (unknown, expired, or not this account's)",
    )
}

/// A tool call that got no answer from a tool, as the MCP layer answers it (its source logged).
pub fn call_error(err: &CallError) -> McpError {
    log_source(err);
    let code = match err {
        CallError::UnknownTool => RpcCode::MethodNotFound,
        CallError::Refused(_) => RpcCode::PaymentRequired,
        CallError::NotRecorded(_) => RpcCode::InternalError,
    };
    mcp_error(code, err.to_string())
}

/// A JSON-RPC error response with its HTTP status; `id` is echoed when it could be read.
pub fn error_response(
    status: StatusCode,
    code: RpcCode,
    message: &str,
    id: Option<Value>,
) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code.number(), "message": message},
    });
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
