//! The authorization endpoint (RFC 6749 §4.1.1, OAuth 2.1): the request is checked in the
//! order that keeps the server from becoming an open redirector, the signed-in owner consents
//! or refuses, and the browser goes back to the client with a code or an error.

use toolgate_domain::AccountId;
use toolgate_store::{Grant, NewCode, StoreError};

use crate::clients::ClientError;
use crate::token::FAMILY_CHARS;
use crate::{
    AuthServer, AuthorizeError, CODE_TTL, ErrorRedirect, OAuthError, SCOPE_MCP, SCOPES, error,
    fresh_token, millis,
};

/// The characters of a PKCE S256 challenge: base64url of 32 bytes, without padding.
const CHALLENGE_CHARS: usize = 43;

/// An authorization request's query, as it arrived (values decoded, nothing checked).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizeParams {
    /// `response_type`: must be `code`.
    pub response_type: Option<String>,
    /// `client_id`: a registered id or a metadata document's https URL.
    pub client_id: Option<String>,
    /// `redirect_uri`: one of the client's, exactly.
    pub redirect_uri: Option<String>,
    /// `state`: returned to the client untouched.
    pub state: Option<String>,
    /// `scope`: space-separated; `mcp` when absent.
    pub scope: Option<String>,
    /// `code_challenge`: PKCE S256.
    pub code_challenge: Option<String>,
    /// `code_challenge_method`: must be `S256`.
    pub code_challenge_method: Option<String>,
    /// `resource` (RFC 8707): this service's `/mcp` when given.
    pub resource: Option<String>,
}

impl AuthorizeParams {
    /// Reads decoded query pairs, ignoring unknown names and treating empty values as absent.
    /// A repeated parameter is refused without redirecting (RFC 6749 §3.1): which of its values
    /// is the client's own cannot be told.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Self, AuthorizeError> {
        let mut params = Self::default();
        for (name, value) in pairs {
            let slot = match name.as_str() {
                "response_type" => &mut params.response_type,
                "client_id" => &mut params.client_id,
                "redirect_uri" => &mut params.redirect_uri,
                "state" => &mut params.state,
                "scope" => &mut params.scope,
                "code_challenge" => &mut params.code_challenge,
                "code_challenge_method" => &mut params.code_challenge_method,
                "resource" => &mut params.resource,
                _ => continue,
            };
            if slot.is_some() {
                return Err(AuthorizeError::NoRedirect(format!(
                    "the authorization request repeats the parameter {name}: start the \
                     connection again from your app"
                )));
            }
            if !value.is_empty() {
                *slot = Some(value.clone());
            }
        }
        Ok(params)
    }

    /// The parameters as pairs, e.g. for the hidden fields of a consent form.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("response_type", &self.response_type),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("state", &self.state),
            ("scope", &self.scope),
            ("code_challenge", &self.code_challenge),
            ("code_challenge_method", &self.code_challenge_method),
            ("resource", &self.resource),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.clone().map(|value| (name, value)))
        .collect()
    }
}

/// A checked authorization request, waiting for the owner's consent. Only
/// [`AuthServer::authorize`] makes one, so [`AuthServer::approve`] can trust it: a consent
/// form carries [`AuthorizeRequest::params`] and is checked again when submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizeRequest {
    client_id: String,
    client_name: String,
    redirect_uri: String,
    state: Option<String>,
    scope: String,
    code_challenge: String,
    resource: String,
}

impl AuthorizeRequest {
    /// The client's id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The client's name, for the consent page (it is the client's claim, not verified).
    pub fn client_name(&self) -> &str {
        &self.client_name
    }

    /// Where the browser goes back to.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// The scopes asked for, space-separated.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The client's `state`, if it sent one.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }

    /// The checked request as parameters, to carry through the consent form and check again.
    pub fn params(&self) -> AuthorizeParams {
        AuthorizeParams {
            response_type: Some("code".to_owned()),
            client_id: Some(self.client_id.clone()),
            redirect_uri: Some(self.redirect_uri.clone()),
            state: self.state.clone(),
            scope: Some(self.scope.clone()),
            code_challenge: Some(self.code_challenge.clone()),
            code_challenge_method: Some("S256".to_owned()),
            resource: Some(self.resource.clone()),
        }
    }
}

impl AuthServer {
    /// Checks an authorization request for `owner`, the signed-in account if there is one (a
    /// client metadata document is fetched only for a signed-in account, at most
    /// [`crate::DOCUMENT_FETCHES_PER_HOUR`] times an hour each). Until the client and its redirect URI
    /// are known to match, a refusal is [`AuthorizeError::NoRedirect`] (an error page); after
    /// that it is [`AuthorizeError::Redirect`], which may go back to the client with `error`,
    /// `state` and `iss` once the owner has signed in.
    pub async fn authorize(
        &self,
        params: &AuthorizeParams,
        owner: Option<&AccountId>,
    ) -> Result<AuthorizeRequest, AuthorizeError> {
        let client_id = given(&params.client_id).ok_or_else(|| {
            AuthorizeError::NoRedirect(
                "the authorization request has no client_id: start the connection again from \
                 your app"
                    .to_owned(),
            )
        })?;
        let client = self
            .resolve_client(client_id, owner)
            .await
            .map_err(|err| match err {
                ClientError::Refused(message) => AuthorizeError::NoRedirect(message),
                ClientError::TooManyFetches(wait) => AuthorizeError::TooManyFetches(wait),
                ClientError::Unavailable => AuthorizeError::Unavailable,
            })?;
        let redirect_uri = match (given(&params.redirect_uri), client.redirect_uris.as_slice()) {
            (Some(uri), known)
                if known
                    .iter()
                    .any(|candidate| redirect_matches(candidate, uri)) =>
            {
                uri.to_owned()
            }
            (Some(_), _) => {
                return Err(AuthorizeError::NoRedirect(
                    "the redirect_uri is not one this client registered, so the browser was not \
                     sent there: start the connection again from your app"
                        .to_owned(),
                ));
            }
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(AuthorizeError::NoRedirect(
                    "the authorization request has no redirect_uri and the client registered \
                     several: start the connection again from your app"
                        .to_owned(),
                ));
            }
        };
        let state = given(&params.state).map(str::to_owned);
        let refuse = |code: &'static str, description: &str| {
            AuthorizeError::Redirect(ErrorRedirect {
                url: self.error_redirect(&redirect_uri, state.as_deref(), code, description),
                error: code,
                description: description.to_owned(),
            })
        };
        match given(&params.response_type) {
            Some("code") => {}
            None => return Err(refuse("invalid_request", "response_type is required")),
            Some(_) => {
                return Err(refuse(
                    "unsupported_response_type",
                    "only response_type=code is supported",
                ));
            }
        }
        let Some(code_challenge) = given(&params.code_challenge) else {
            return Err(refuse(
                "invalid_request",
                "PKCE is required: send code_challenge and code_challenge_method=S256",
            ));
        };
        if given(&params.code_challenge_method) != Some("S256") {
            return Err(refuse(
                "invalid_request",
                "code_challenge_method must be S256 (plain is not accepted)",
            ));
        }
        if !is_s256_challenge(code_challenge) {
            return Err(refuse(
                "invalid_request",
                "code_challenge must be the base64url SHA-256 of the verifier (43 characters)",
            ));
        }
        if let Some(resource) = given(&params.resource)
            && resource != self.resource
        {
            return Err(refuse(
                "invalid_target",
                &format!(
                    "this server issues tokens only for the resource {}",
                    self.resource
                ),
            ));
        }
        let scope = normalize_scope(given(&params.scope)).ok_or_else(|| {
            refuse(
                "invalid_scope",
                &format!("the scopes offered are: {}", SCOPES.join(" ")),
            )
        })?;
        Ok(AuthorizeRequest {
            client_id: client.client_id,
            client_name: client.name,
            redirect_uri,
            state,
            scope,
            code_challenge: code_challenge.to_owned(),
            resource: self.resource.clone(),
        })
    }

    /// The owner of `account` consented: stores a code (valid 60 s, once) starting a new token
    /// family, and answers the URL to send the browser to (`code`, `state`, `iss`).
    pub async fn approve(
        &self,
        account: &AccountId,
        request: &AuthorizeRequest,
    ) -> Result<String, OAuthError> {
        let code = fresh_token()?;
        let family = fresh_token()?;
        let now = self.now();
        self.store
            .put_code(&NewCode {
                code_hash: code.hash(),
                family: family
                    .expose()
                    .get(..FAMILY_CHARS)
                    .unwrap_or_default()
                    .to_owned(),
                grant: Grant {
                    account: account.clone(),
                    client_id: request.client_id.clone(),
                    scope: request.scope.clone(),
                    resource: request.resource.clone(),
                },
                redirect_uri: request.redirect_uri.clone(),
                code_challenge: request.code_challenge.clone(),
                expires_at: now.saturating_add(millis(CODE_TTL)),
            })
            .await
            .map_err(|err| match err {
                StoreError::NotFound => OAuthError::InvalidRequest(
                    "the signed-in account no longer exists: sign in again".to_owned(),
                ),
                other => error::storage(other),
            })?;
        let mut pairs = vec![("code", code.expose())];
        if let Some(state) = &request.state {
            pairs.push(("state", state));
        }
        pairs.push(("iss", &self.issuer));
        Ok(with_query(&request.redirect_uri, &pairs))
    }

    /// The owner refused: the URL to send the browser to, with `error=access_denied`.
    pub fn deny(&self, request: &AuthorizeRequest) -> String {
        self.error_redirect(
            &request.redirect_uri,
            request.state.as_deref(),
            "access_denied",
            "the account owner denied access",
        )
    }

    /// An error response to the client's redirect URI (RFC 6749 §4.1.2.1, RFC 9207).
    fn error_redirect(
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
        with_query(redirect_uri, &pairs)
    }
}

/// A parameter's value, unless absent or empty.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

/// Whether `challenge` has the shape of a PKCE S256 challenge.
fn is_s256_challenge(challenge: &str) -> bool {
    challenge.len() == CHALLENGE_CHARS
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The scopes asked for, deduplicated in a fixed order; `mcp` when none; `None` when one is
/// not offered.
pub(crate) fn normalize_scope(asked: Option<&str>) -> Option<String> {
    let asked: Vec<&str> = asked.unwrap_or(SCOPE_MCP).split_whitespace().collect();
    if asked.iter().any(|scope| !SCOPES.contains(scope)) {
        return None;
    }
    let granted: Vec<&str> = SCOPES
        .into_iter()
        .filter(|scope| asked.contains(scope))
        .collect();
    Some(if granted.is_empty() {
        SCOPE_MCP.to_owned()
    } else {
        granted.join(" ")
    })
}

/// Whether a presented redirect URI is the registered one: exactly, or (RFC 8252 §7.3) a
/// loopback IP address's `http` URI that differs only in its port (1 to 65535), which a native
/// app picks when it starts.
pub(crate) fn redirect_matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    let without_port = |uri: &str| -> Option<(String, String)> {
        let rest = uri.strip_prefix("http://")?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let host = if authority.starts_with("[::1]") {
            "[::1]"
        } else {
            authority.split(':').next()?
        };
        if host != "127.0.0.1" && host != "[::1]" {
            return None;
        }
        // a real port (1 to 65535, at most 5 digits), not any run of digits
        let port = &authority[host.len()..];
        if !(port.is_empty()
            || port.strip_prefix(':').is_some_and(|p| {
                p.len() <= 5
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && p.parse::<u16>().is_ok_and(|n| n > 0)
            }))
        {
            return None;
        }
        Some((host.to_owned(), path.to_owned()))
    };
    matches!((without_port(registered), without_port(presented)), (Some(a), Some(b)) if a == b)
}

/// `uri` with `pairs` appended to its query, percent-encoded.
fn with_query(uri: &str, pairs: &[(&str, &str)]) -> String {
    let mut url = uri.to_owned();
    if !url.contains('?') {
        url.push('?');
    } else if !url.ends_with('?') && !url.ends_with('&') {
        url.push('&');
    }
    let query: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect();
    url.push_str(&query.join("&"));
    url
}

/// Percent-encodes everything but the unreserved characters (RFC 3986 §2.3).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod loopback_tests {
    use super::redirect_matches;

    #[test]
    fn loopback_redirects_may_change_only_their_port() {
        let registered = "http://127.0.0.1:3000/callback";
        assert!(redirect_matches(
            registered,
            "http://127.0.0.1:3000/callback"
        ));
        assert!(redirect_matches(
            registered,
            "http://127.0.0.1:51234/callback"
        ));
        assert!(redirect_matches("http://[::1]/cb", "http://[::1]:8080/cb"));
        for other in [
            "http://127.0.0.1:51234/callback2",
            "http://127.0.0.1:51234/callback?x=1",
            "http://127.0.0.2:3000/callback",
            "http://localhost:3000/callback",
            "https://127.0.0.1:3000/callback",
            "http://127.0.0.1:3000@evil.example/callback",
            "http://127.0.0.1:x/callback",
        ] {
            assert!(!redirect_matches(registered, other), "{other}");
        }
        assert!(!redirect_matches(
            "https://app.example/cb",
            "https://app.example:444/cb"
        ));
    }
}

#[cfg(test)]
#[path = "redirect_proptests.rs"]
mod redirect_proptests;
