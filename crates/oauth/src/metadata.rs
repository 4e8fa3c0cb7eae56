//! Discovery: what a client reads before it starts, and the challenge that sends it there.

use serde_json::{Value, json};

use crate::{AuthServer, SCOPE_MCP, SCOPES};

impl AuthServer {
    /// Authorization server metadata (RFC 8414), served at
    /// `/.well-known/oauth-authorization-server`.
    pub fn metadata(&self) -> Value {
        let issuer = &self.issuer;
        json!({
            "issuer": issuer,
            // under /dashboard, so that the dashboard's session cookie reaches it
            "authorization_endpoint": format!("{issuer}/dashboard/oauth/authorize"),
            "token_endpoint": format!("{issuer}/oauth/token"),
            "registration_endpoint": format!("{issuer}/oauth/register"),
            "revocation_endpoint": format!("{issuer}/oauth/revoke"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": SCOPES,
            "authorization_response_iss_parameter_supported": true,
            "client_id_metadata_document_supported": true,
        })
    }

    /// Protected resource metadata (RFC 9728) of `/mcp`, served at
    /// `/.well-known/oauth-protected-resource/mcp`.
    pub fn resource_metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": [SCOPE_MCP],
            "bearer_methods_supported": ["header"],
            "resource_name": "toolgate",
        })
    }

    /// The `WWW-Authenticate` value of a 401 from `/mcp` (RFC 9728 §5.1, RFC 6750 §3): where
    /// the resource metadata is, the scope to ask for, and `error` when a token was refused
    /// (see [`crate::TokenError::challenge_error`]). An `error` that is not a bare code word is
    /// left out rather than written into a header.
    pub fn challenge(&self, error: Option<&str>) -> String {
        let mut value = format!(
            "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\", \
             scope=\"{SCOPE_MCP}\"",
            self.issuer
        );
        if let Some(code) = error.filter(|code| {
            !code.is_empty()
                && code
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        }) {
            value.push_str(&format!(", error=\"{code}\""));
        }
        value
    }
}
