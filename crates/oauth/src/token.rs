//! The token endpoint's values (RFC 6749 §4.1.3 and §6 as OAuth 2.1 tightens them, RFC 7009):
//! the form a request is read from, PKCE S256, refresh-token families and the answer.
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

use crate::{ACCESS_TTL, OAuthError};

/// Hex characters of a family id, the first half of each refresh token.
pub const FAMILY_CHARS: usize = 32;

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

impl TokenAnswer {
    /// The answer giving out `access` and `refresh` for `scope`.
    pub fn new(access: &SecretToken, refresh: &SecretToken, scope: String) -> Self {
        Self {
            access_token: access.expose().to_owned(),
            token_type: "Bearer",
            expires_in: ACCESS_TTL.as_secs(),
            refresh_token: refresh.expose().to_owned(),
            scope,
        }
    }
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
#[derive(Debug)]
pub struct TokenForm<'a>(HashMap<&'a str, &'a str>);

impl<'a> TokenForm<'a> {
    /// Reads the pairs; a repeated name is `invalid_request`.
    pub fn parse(pairs: &'a [(String, String)]) -> Result<Self, OAuthError> {
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
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.0.get(name).copied().filter(|value| !value.is_empty())
    }

    /// The value of `name`; absent or empty is `invalid_request`.
    pub fn required(&self, name: &str) -> Result<&'a str, OAuthError> {
        self.get(name)
            .ok_or_else(|| OAuthError::InvalidRequest(format!("the parameter {name} is required")))
    }
}

/// `invalid_request` unless `verifier` has the shape RFC 7636 §4.1 gives a code verifier.
pub fn check_verifier(verifier: &str) -> Result<(), OAuthError> {
    let shaped = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if shaped {
        Ok(())
    } else {
        Err(OAuthError::InvalidRequest(
            "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~".to_owned(),
        ))
    }
}

/// Whether `verifier` hashes to `challenge` (RFC 7636 §4.6, S256), compared in constant time.
pub fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}

/// A new family id, drawn from a fresh random token.
pub fn family_id(random: &SecretToken) -> String {
    random
        .expose()
        .get(..FAMILY_CHARS)
        .unwrap_or_default()
        .to_owned()
}

/// The family a presented refresh token names (its first half).
pub fn family_of(token: &SecretToken) -> Option<&str> {
    token.expose().get(..FAMILY_CHARS)
}

/// A refresh token of `family`, its second half drawn from a fresh random token; `None` when
/// `family` is not 32 lowercase hex characters.
pub fn refresh_token(family: &str, random: &SecretToken) -> Option<SecretToken> {
    let random_half = random.expose().get(..FAMILY_CHARS).unwrap_or_default();
    SecretToken::parse(&format!("{family}{random_half}"))
}
