//! Who this authorization server is, and what it writes that names it: the discovery documents,
//! the challenge that sends a client there, and the redirects back to a client.

use serde_json::{Value, json};

use crate::{AuthorizeRequest, OAuthError, SCOPE_MCP, SCOPES};

/// The issuer identifier and the one resource it issues tokens for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    issuer: String,
    resource: String,
}

impl Issuer {
    /// The issuer reachable at `public_url` (a trailing slash dropped), issuing tokens for its
    /// `/mcp`.
    pub fn new(public_url: &str) -> Self {
        let issuer = public_url.trim_end_matches('/').to_owned();
        Self {
            resource: format!("{issuer}/mcp"),
            issuer,
        }
    }

    /// The issuer identifier: the public URL without a trailing slash.
    pub fn id(&self) -> &str {
        &self.issuer
    }

    /// The protected resource (RFC 8707) that tokens are issued for: `{issuer}/mcp`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// `invalid_target` unless `resource`, when given, is this server's resource.
    pub fn check_resource(&self, resource: Option<&str>) -> Result<(), OAuthError> {
        match resource {
            Some(resource) if resource != self.resource => Err(self.wrong_target()),
            _ => Ok(()),
        }
    }

    /// `invalid_target` for a `resource` other than ours.
    pub fn wrong_target(&self) -> OAuthError {
        OAuthError::InvalidTarget(format!(
            "this server issues tokens only for the resource {}",
            self.resource
        ))
    }

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

    /// The URL that sends the browser back with `code` for an approved `request` (`code`,
    /// `state`, `iss`).
    pub fn code_redirect(&self, request: &AuthorizeRequest, code: &str) -> String {
        let mut pairs = vec![("code", code)];
        if let Some(state) = request.state() {
            pairs.push(("state", state));
        }
        pairs.push(("iss", &self.issuer));
        crate::uri::with_query(request.redirect_uri(), &pairs)
    }

    /// The URL that sends the browser back when the owner refused `request`
    /// (`error=access_denied`).
    pub fn denied_redirect(&self, request: &AuthorizeRequest) -> String {
        self.error_redirect(
            request.redirect_uri(),
            request.state(),
            "access_denied",
            "the account owner denied access",
        )
    }

    /// An error response to the client's redirect URI (RFC 6749 §4.1.2.1, RFC 9207).
    pub(crate) fn error_redirect(
        &self,
        redirect_uri: &str,
        state: Option<&str>,
        code: &str,
        description: &str,
    ) -> String {
        let mut pairs = vec![("error", code), ("error_description", description)];
        if let Some(state) = state {
            pairs.push(("state", state));
        }
        pairs.push(("iss", &self.issuer));
        crate::uri::with_query(redirect_uri, &pairs)
    }
}
