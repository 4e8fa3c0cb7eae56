//! The token endpoint (RFC 6749 §4.1.3 and §6 as OAuth 2.1 tightens them) and revocation
//! (RFC 7009).
//!
//! A refresh token is the 32 hex characters of its family followed by 32 random ones: the store
//! rotates a refresh token only into its own family, and this is how the token names it without
//! a look-up. The random half (128 bits) is what makes it unguessable; the family id is no
//! secret.

use std::collections::HashMap;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use toolgate_domain::SecretToken;
use toolgate_store::{CodeUse, Grant, NewTokens, Refreshed};

use crate::{
    ACCESS_TTL, AuthServer, OAuthError, REFRESH_TTL, SCOPE_OFFLINE, SCOPES, error, fresh_token,
    millis,
};

/// Hex characters of a family id, the first half of each refresh token.
pub(crate) const FAMILY_CHARS: usize = 32;

/// A successful token response (RFC 6749 §5.1); `Debug` never shows the tokens.
#[derive(Clone, Serialize)]
pub struct TokenAnswer {
    /// The access token for `/mcp`.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds the access token lives.
    pub expires_in: u64,
    /// The refresh token (rotated on each use).
    pub refresh_token: String,
    /// The granted scopes, space-separated.
    pub scope: String,
}

impl fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAnswer")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A decoded form body: each parameter at most once (RFC 6749 §3.1), empty values as absent.
struct Form<'a>(HashMap<&'a str, &'a str>);

impl<'a> Form<'a> {
    /// Reads the pairs; a repeated name is `invalid_request`.
    fn parse(pairs: &'a [(String, String)]) -> Result<Self, OAuthError> {
        let mut fields = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if fields.insert(name.as_str(), value.as_str()).is_some() {
                let shown: String = name.chars().take(40).collect();
                return Err(OAuthError::InvalidRequest(format!(
                    "the parameter {shown} is repeated"
                )));
            }
        }
        Ok(Self(fields))
    }

    /// The value of `name`, unless absent or empty.
    fn get(&self, name: &str) -> Option<&'a str> {
        self.0.get(name).copied().filter(|value| !value.is_empty())
    }

    /// The value of `name`; absent or empty is `invalid_request`.
    fn required(&self, name: &str) -> Result<&'a str, OAuthError> {
        self.get(name)
            .ok_or_else(|| OAuthError::InvalidRequest(format!("the parameter {name} is required")))
    }
}

impl AuthServer {
    /// Answers a token request (a decoded `application/x-www-form-urlencoded` body):
    /// `authorization_code` with PKCE, or `refresh_token` (which rotates the refresh token).
    pub async fn token(&self, form: &[(String, String)]) -> Result<TokenAnswer, OAuthError> {
        let form = Form::parse(form)?;
        match form.required("grant_type")? {
            "authorization_code" => self.exchange_code(&form).await,
            "refresh_token" => self.refresh(&form).await,
            _ => Err(OAuthError::UnsupportedGrantType(
                "grant_type must be authorization_code or refresh_token".to_owned(),
            )),
        }
    }

    /// Revokes the token named by the form's `token` (RFC 7009 §2.1), and with it its whole
    /// family; a token that is unknown or malformed is no error (§2.2).
    pub async fn revoke(&self, form: &[(String, String)]) -> Result<(), OAuthError> {
        let form = Form::parse(form)?;
        let presented = form.required("token")?;
        let Some(token) = SecretToken::parse(presented) else {
            return Ok(());
        };
        let revoked = self
            .store
            .revoke_token(&token.hash(), self.now())
            .await
            .map_err(error::storage)?;
        if revoked {
            self.cache.forget_all().await;
        }
        Ok(())
    }

    /// `grant_type=authorization_code` (RFC 6749 §4.1.3, RFC 7636 §4.5).
    async fn exchange_code(&self, form: &Form<'_>) -> Result<TokenAnswer, OAuthError> {
        let code = form.required("code")?;
        let redirect_uri = form.required("redirect_uri")?;
        let client_id = form.required("client_id")?;
        let verifier = form.required("code_verifier")?;
        if !is_verifier(verifier) {
            return Err(OAuthError::InvalidRequest(
                "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~".to_owned(),
            ));
        }
        let resource = form.get("resource");
        if resource.is_some_and(|resource| resource != self.resource) {
            return Err(self.wrong_target());
        }
        let invalid = || {
            OAuthError::InvalidGrant(
                "the authorization code is invalid or expired (codes last 60 seconds and work \
                 once): authorize again"
                    .to_owned(),
            )
        };
        let code = SecretToken::parse(code).ok_or_else(invalid)?;
        let used = match self
            .store
            .use_code(&code.hash(), self.now())
            .await
            .map_err(error::storage)?
        {
            CodeUse::Fresh(used) => used,
            CodeUse::Reused => {
                // RFC 6749 §4.1.2: whoever replays a code may have stolen it
                self.cache.forget_all().await;
                tracing::warn!(client_id = %client_id, "oauth: an authorization code was replayed");
                return Err(OAuthError::InvalidGrant(
                    "the authorization code was used already, so the tokens issued for it are \
                     revoked: authorize again"
                        .to_owned(),
                ));
            }
            CodeUse::Invalid => return Err(invalid()),
        };
        if used.grant.client_id != client_id {
            return Err(OAuthError::InvalidGrant(
                "the authorization code was issued to another client".to_owned(),
            ));
        }
        if used.redirect_uri != redirect_uri {
            return Err(OAuthError::InvalidGrant(
                "redirect_uri differs from the one of the authorization request".to_owned(),
            ));
        }
        if resource.is_some_and(|resource| resource != used.grant.resource) {
            return Err(self.wrong_target());
        }
        if !pkce_matches(verifier, &used.code_challenge) {
            return Err(OAuthError::InvalidGrant(
                "the code_verifier does not match the code_challenge of the authorization request"
                    .to_owned(),
            ));
        }
        self.issue(used.family, used.grant).await
    }

    /// Stores and answers a new access and refresh token of `family`.
    async fn issue(&self, family: String, grant: Grant) -> Result<TokenAnswer, OAuthError> {
        let (access, refresh, next) = self.next_tokens(family, grant.clone())?;
        self.store.put_tokens(&next).await.map_err(error::storage)?;
        Ok(answer(access, refresh, grant.scope))
    }

    /// `grant_type=refresh_token` (RFC 6749 §6), rotating the token (OAuth 2.1 §4.3.1).
    async fn refresh(&self, form: &Form<'_>) -> Result<TokenAnswer, OAuthError> {
        let presented = form.required("refresh_token")?;
        let client_id = form.required("client_id")?;
        if let Some(resource) = form.get("resource")
            && resource != self.resource
        {
            return Err(OAuthError::InvalidTarget(format!(
                "this server issues tokens only for the resource {}",
                self.resource
            )));
        }
        let asked: Option<Vec<&str>> = form
            .get("scope")
            .map(|scope| scope.split_whitespace().collect());
        if asked.iter().flatten().any(|scope| !SCOPES.contains(scope)) {
            return Err(OAuthError::InvalidScope(format!(
                "the scopes offered are: {}",
                SCOPES.join(" ")
            )));
        }
        let invalid = || {
            OAuthError::InvalidGrant(
                "the refresh token is invalid, expired, revoked or another client's: authorize \
                 again"
                    .to_owned(),
            )
        };
        let token = SecretToken::parse(presented).ok_or_else(invalid)?;
        let family = token.expose().get(..FAMILY_CHARS).ok_or_else(invalid)?;
        // the store reads only the family and the hashes: the new tokens inherit the grant
        let placeholder = Grant {
            account: toolgate_domain::AccountId::from_stored(String::new()),
            client_id: client_id.to_owned(),
            scope: String::new(),
            resource: self.resource.clone(),
        };
        let (access, refresh, next) = self.next_tokens(family.to_owned(), placeholder)?;
        let outcome = self
            .store
            .refresh(&token.hash(), client_id, self.now(), &next)
            .await
            .map_err(error::storage)?;
        let grant = match outcome {
            Refreshed::Rotated(grant) => grant,
            Refreshed::Reused => {
                self.cache.forget_all().await;
                tracing::warn!(client_id = %client_id, "oauth: a rotated refresh token was replayed");
                return Err(OAuthError::InvalidGrant(
                    "the refresh token was used already, so every token of this authorization \
                     is revoked: authorize again"
                        .to_owned(),
                ));
            }
            Refreshed::Invalid => return Err(invalid()),
        };
        // A refresh keeps the grant's scope (the store cannot narrow it; the answer's `scope`
        // says what was kept). Asking for more than was granted is refused (RFC 6749 §6), but
        // the token was rotated already: its family goes, as the client must authorize again.
        // `offline_access` is never "more": holding a refresh token is what it asks for.
        let granted: Vec<&str> = grant.scope.split_whitespace().collect();
        let exceeds = asked
            .iter()
            .flatten()
            .any(|scope| *scope != SCOPE_OFFLINE && !granted.contains(scope));
        if exceeds {
            self.store
                .revoke_token(&next.access.0, self.now())
                .await
                .map_err(error::storage)?;
            self.cache.forget_all().await;
            return Err(OAuthError::InvalidScope(format!(
                "the scope asked for exceeds the one granted ({}): authorize again",
                grant.scope
            )));
        }
        Ok(answer(access, refresh, grant.scope))
    }

    /// A new access token and a refresh token of `family`, and what the store keeps of them.
    fn next_tokens(
        &self,
        family: String,
        grant: Grant,
    ) -> Result<(SecretToken, SecretToken, NewTokens), OAuthError> {
        let access = fresh_token()?;
        let random = fresh_token()?;
        let random_half = random.expose().get(..FAMILY_CHARS).unwrap_or_default();
        let refresh = SecretToken::parse(&format!("{family}{random_half}")).ok_or_else(|| {
            tracing::error!("oauth: a token family id is not 32 lowercase hex characters");
            OAuthError::ServerError("the service could not issue a refresh token".to_owned())
        })?;
        let now = self.now();
        let next = NewTokens {
            family,
            grant,
            access: (access.hash(), now.saturating_add(millis(ACCESS_TTL))),
            refresh: Some((refresh.hash(), now.saturating_add(millis(REFRESH_TTL)))),
        };
        Ok((access, refresh, next))
    }

    /// `invalid_target` for a `resource` other than ours.
    fn wrong_target(&self) -> OAuthError {
        OAuthError::InvalidTarget(format!(
            "this server issues tokens only for the resource {}",
            self.resource
        ))
    }
}

/// The token response of a new pair.
fn answer(access: SecretToken, refresh: SecretToken, scope: String) -> TokenAnswer {
    TokenAnswer {
        access_token: access.expose().to_owned(),
        token_type: "Bearer",
        expires_in: ACCESS_TTL.as_secs(),
        refresh_token: refresh.expose().to_owned(),
        scope,
    }
}

/// Whether `verifier` has the shape RFC 7636 §4.1 gives a code verifier.
fn is_verifier(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// Whether `verifier` hashes to `challenge` (RFC 7636 §4.6, S256), compared in constant time.
pub(crate) fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}
