//! The errors of the authorization server, in the RFCs' words: [`OAuthError`] for the token,
//! revocation and registration endpoints, [`AuthorizeError`] for the authorization endpoint,
//! [`TokenError`] for a bearer token presented at `/mcp`. No message carries a token or secret.

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

use crate::DOCUMENT_FETCHES_PER_HOUR;

/// An OAuth error response: one variant per RFC error code, each with its description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    /// RFC 6749 §5.2 `invalid_request`: a parameter is missing, repeated or malformed.
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// RFC 6749 §5.2 `invalid_client`: the client is unknown or may not do this.
    #[error("invalid_client: {0}")]
    InvalidClient(String),
    /// RFC 6749 §5.2 `invalid_grant`: the code or refresh token is invalid, expired, revoked,
    /// used, or was issued to another client or redirect URI (or the PKCE verifier is wrong).
    #[error("invalid_grant: {0}")]
    InvalidGrant(String),
    /// RFC 6749 §5.2 `unauthorized_client`: the client may not use this grant type.
    #[error("unauthorized_client: {0}")]
    UnauthorizedClient(String),
    /// RFC 6749 §5.2 `unsupported_grant_type`: neither `authorization_code` nor `refresh_token`.
    #[error("unsupported_grant_type: {0}")]
    UnsupportedGrantType(String),
    /// RFC 6749 §5.2 `invalid_scope`: a scope is unknown or exceeds what was granted.
    #[error("invalid_scope: {0}")]
    InvalidScope(String),
    /// RFC 8707 §2 `invalid_target`: the `resource` is not this service's `/mcp`.
    #[error("invalid_target: {0}")]
    InvalidTarget(String),
    /// RFC 7591 §3.2.2 `invalid_redirect_uri`: a redirect URI is missing or not acceptable.
    #[error("invalid_redirect_uri: {0}")]
    InvalidRedirectUri(String),
    /// RFC 7591 §3.2.2 `invalid_client_metadata`: other client metadata is not acceptable.
    #[error("invalid_client_metadata: {0}")]
    InvalidClientMetadata(String),
    /// RFC 6749 §4.1.2.1 `server_error`: the server failed; the detail went to the log.
    #[error("server_error: {0}")]
    ServerError(String),
    /// RFC 6749 §4.1.2.1 `temporarily_unavailable`: storage is unreachable; retry later.
    #[error("temporarily_unavailable: {0}")]
    TemporarilyUnavailable(String),
}

impl OAuthError {
    /// The error code as it goes on the wire (`error`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidClient(_) => "invalid_client",
            Self::InvalidGrant(_) => "invalid_grant",
            Self::UnauthorizedClient(_) => "unauthorized_client",
            Self::UnsupportedGrantType(_) => "unsupported_grant_type",
            Self::InvalidScope(_) => "invalid_scope",
            Self::InvalidTarget(_) => "invalid_target",
            Self::InvalidRedirectUri(_) => "invalid_redirect_uri",
            Self::InvalidClientMetadata(_) => "invalid_client_metadata",
            Self::ServerError(_) => "server_error",
            Self::TemporarilyUnavailable(_) => "temporarily_unavailable",
        }
    }

    /// The human-readable description (`error_description`).
    pub fn description(&self) -> &str {
        match self {
            Self::InvalidRequest(text)
            | Self::InvalidClient(text)
            | Self::InvalidGrant(text)
            | Self::UnauthorizedClient(text)
            | Self::UnsupportedGrantType(text)
            | Self::InvalidScope(text)
            | Self::InvalidTarget(text)
            | Self::InvalidRedirectUri(text)
            | Self::InvalidClientMetadata(text)
            | Self::ServerError(text)
            | Self::TemporarilyUnavailable(text) => text,
        }
    }

    /// The JSON error body (RFC 6749 §5.2): `error` and `error_description`.
    pub fn body(&self) -> Value {
        json!({ "error": self.code(), "error_description": self.description() })
    }

    /// The HTTP status the RFCs give this error: 401 for `invalid_client`, 500 for
    /// `server_error`, 503 for `temporarily_unavailable`, 400 otherwise.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::InvalidClient(_) => 401,
            Self::ServerError(_) => 500,
            Self::TemporarilyUnavailable(_) => 503,
            _ => 400,
        }
    }
}

/// Why an authorization request was refused, and how the refusal must be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizeError {
    /// The client or its redirect URI cannot be trusted: show this message on an error page and
    /// never redirect (RFC 6749 §4.1.2.1: redirecting here would make an open redirector).
    NoRedirect(String),
    /// The client and its redirect URI are verified: the refusal may go back to the client, but
    /// only once the owner has signed in. Anyone may register a client, so before that it is an
    /// error page too, or the service would bounce visitors to wherever such a client points
    /// (RFC 9700 §4.11.2).
    Redirect(ErrorRedirect),
    /// The signed-in account had as many client metadata documents fetched within the hour as
    /// allowed; another may be fetched after this wait.
    TooManyFetches(Duration),
    /// Storage cannot be reached: show an error page asking to retry (the detail was logged).
    Unavailable,
}

/// An error response for a verified client's redirect URI (RFC 6749 §4.1.2.1, RFC 9207).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRedirect {
    /// The redirect URI with `error`, `error_description`, `state` and `iss` added.
    pub url: String,
    /// The error code, e.g. `invalid_scope`.
    pub error: &'static str,
    /// What is wrong, in words.
    pub description: String,
}

impl fmt::Display for AuthorizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRedirect(message) => f.write_str(message),
            Self::Redirect(back) => write!(
                f,
                "the app's authorization request is not valid: {} ({}). Start the connection \
                 again from your app",
                back.description, back.error
            ),
            Self::TooManyFetches(wait) => write!(
                f,
                "this account has had {DOCUMENT_FETCHES_PER_HOUR} client metadata documents \
                 fetched within the hour, the most allowed: try again in {} minutes",
                wait.as_secs().div_ceil(60).max(1)
            ),
            Self::Unavailable => {
                f.write_str("the service cannot answer right now; retry in a moment")
            }
        }
    }
}

impl std::error::Error for AuthorizeError {}

/// Why a bearer token presented at `/mcp` was refused; each message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// no token was presented
    #[error(
        "this endpoint needs an OAuth access token (Authorization: Bearer …): connect your MCP \
         client to it and sign in when it asks, or use your personal URL instead"
    )]
    Missing,
    /// the token does not have the shape of one of ours
    #[error("the OAuth access token is malformed: reconnect your MCP client to sign in again")]
    Malformed,
    /// unknown, expired or revoked
    #[error(
        "the OAuth access token is unknown, expired or revoked: let your MCP client refresh \
         it, or reconnect to sign in again"
    )]
    Invalid,
    /// issued for another resource than this service's `/mcp`
    #[error(
        "the OAuth access token was issued for another resource, not this endpoint: reconnect \
         your MCP client so that it asks for a token for this service's /mcp"
    )]
    WrongAudience,
    /// granted without the `mcp` scope
    #[error(
        "the OAuth access token lacks the `mcp` scope: reconnect your MCP client and allow \
         access to the tools"
    )]
    InsufficientScope,
    /// storage cannot be reached; the detail went to the log
    #[error("the service cannot check the access token right now; retry in a moment")]
    Unavailable,
}

impl TokenError {
    /// The `error` of the `WWW-Authenticate` challenge (RFC 6750 §3.1): `None` when no token
    /// was presented or the failure is ours, `insufficient_scope` for a missing scope,
    /// `invalid_token` otherwise.
    pub fn challenge_error(&self) -> Option<&'static str> {
        match self {
            Self::Missing | Self::Unavailable => None,
            Self::InsufficientScope => Some("insufficient_scope"),
            Self::Malformed | Self::Invalid | Self::WrongAudience => Some("invalid_token"),
        }
    }
}
