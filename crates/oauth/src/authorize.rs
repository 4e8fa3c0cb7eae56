//! The authorization endpoint (RFC 6749 §4.1.1, OAuth 2.1): the request is checked in the
//! order that keeps the server from becoming an open redirector, the signed-in owner consents
//! or refuses, and the browser goes back to the client with a code or an error.

use crate::scope::normalize_scope;
use crate::uri::redirect_matches;
use crate::{AuthorizeError, ErrorRedirect, Issuer, SCOPES};

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

    /// The request's `client_id`: without one there is no client to trust, so the refusal is an
    /// error page ([`AuthorizeError::NoRedirect`]).
    pub fn required_client_id(&self) -> Result<&str, AuthorizeError> {
        given(&self.client_id).ok_or_else(|| {
            AuthorizeError::NoRedirect(
                "the authorization request has no client_id: start the connection again from \
                 your app"
                    .to_owned(),
            )
        })
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
/// [`AuthorizeRequest::check`] makes one, so a request approved can be trusted: a consent form
/// carries [`AuthorizeRequest::params`] and is checked again when submitted.
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

    /// The PKCE S256 challenge the code will be bound to.
    pub fn code_challenge(&self) -> &str {
        &self.code_challenge
    }

    /// The resource the tokens will be for.
    pub fn resource(&self) -> &str {
        &self.resource
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

/// A client as an authorization request is checked against it.
#[derive(Debug, Clone, Copy)]
pub struct KnownClient<'a> {
    /// Its id: registered, or a metadata document's URL.
    pub id: &'a str,
    /// Its name, as it claims it.
    pub name: &'a str,
    /// Its redirect URIs.
    pub redirect_uris: &'a [String],
}

impl AuthorizeRequest {
    /// Checks an authorization request of `client` for tokens of `issuer`. Until the client
    /// and its redirect URI are known to match, a refusal is [`AuthorizeError::NoRedirect`] (an
    /// error page); after that it is [`AuthorizeError::Redirect`], which may go back to the
    /// client with `error`, `state` and `iss` once the owner has signed in.
    pub fn check(
        issuer: &Issuer,
        params: &AuthorizeParams,
        client: KnownClient<'_>,
    ) -> Result<Self, AuthorizeError> {
        let redirect_uri = match (given(&params.redirect_uri), client.redirect_uris) {
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
                url: issuer.error_redirect(&redirect_uri, state.as_deref(), code, description),
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
            && resource != issuer.resource()
        {
            return Err(refuse(
                "invalid_target",
                &format!(
                    "this server issues tokens only for the resource {}",
                    issuer.resource()
                ),
            ));
        }
        let scope = normalize_scope(given(&params.scope)).ok_or_else(|| {
            refuse(
                "invalid_scope",
                &format!("the scopes offered are: {}", SCOPES.join(" ")),
            )
        })?;
        Ok(Self {
            client_id: client.id.to_owned(),
            client_name: client.name.to_owned(),
            redirect_uri,
            state,
            scope,
            code_challenge: code_challenge.to_owned(),
            resource: issuer.resource().to_owned(),
        })
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
