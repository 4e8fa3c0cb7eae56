//! The token endpoint (RFC 6749 §4.1.3 and §6 as OAuth 2.1 tightens them) and revocation
//! (RFC 7009): codes exchanged once, refresh tokens rotated within their family, and a replay of
//! either revoking what it gave. The form, PKCE and the families are `toolgate-oauth`'s.

use toolgate_domain::{AccountId, SecretToken};
use toolgate_oauth::scope::{asked_on_refresh, exceeds_grant};
use toolgate_oauth::token::{check_verifier, family_of, pkce_matches, refresh_token};
use toolgate_oauth::{ACCESS_TTL, OAuthError, REFRESH_TTL, TokenAnswer, TokenForm};
use toolgate_store::{CodeUse, Grant, NewTokens, Refreshed};

use super::{AuthServer, fresh_token, millis, storage};

impl AuthServer {
    /// Answers a token request (a decoded `application/x-www-form-urlencoded` body):
    /// `authorization_code` with PKCE, or `refresh_token` (which rotates the refresh token).
    pub async fn token(&self, form: &[(String, String)]) -> Result<TokenAnswer, OAuthError> {
        let form = TokenForm::parse(form)?;
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
        let form = TokenForm::parse(form)?;
        let presented = form.required("token")?;
        let Some(token) = SecretToken::parse(presented) else {
            return Ok(());
        };
        let revoked = self
            .store
            .revoke_token(&token.hash(), self.now())
            .await
            .map_err(storage)?;
        if revoked {
            self.cache.forget_all().await;
        }
        Ok(())
    }

    /// `grant_type=authorization_code` (RFC 6749 §4.1.3, RFC 7636 §4.5).
    async fn exchange_code(&self, form: &TokenForm<'_>) -> Result<TokenAnswer, OAuthError> {
        let code = form.required("code")?;
        let redirect_uri = form.required("redirect_uri")?;
        let client_id = form.required("client_id")?;
        let verifier = form.required("code_verifier")?;
        check_verifier(verifier)?;
        let resource = form.get("resource");
        self.issuer.check_resource(resource)?;
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
            .map_err(storage)?
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
            return Err(self.issuer.wrong_target());
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
        self.store.put_tokens(&next).await.map_err(storage)?;
        Ok(TokenAnswer::new(&access, &refresh, grant.scope))
    }

    /// `grant_type=refresh_token` (RFC 6749 §6), rotating the token (OAuth 2.1 §4.3.1).
    async fn refresh(&self, form: &TokenForm<'_>) -> Result<TokenAnswer, OAuthError> {
        let presented = form.required("refresh_token")?;
        let client_id = form.required("client_id")?;
        self.issuer.check_resource(form.get("resource"))?;
        let asked = asked_on_refresh(form.get("scope"))?;
        let invalid = || {
            OAuthError::InvalidGrant(
                "the refresh token is invalid, expired, revoked or another client's: authorize \
                 again"
                    .to_owned(),
            )
        };
        let token = SecretToken::parse(presented).ok_or_else(invalid)?;
        let family = family_of(&token).ok_or_else(invalid)?;
        // the store reads only the family and the hashes: the new tokens inherit the grant
        let placeholder = Grant {
            account: AccountId::from_stored(String::new()),
            client_id: client_id.to_owned(),
            scope: String::new(),
            resource: self.issuer.resource().to_owned(),
        };
        let (access, refresh, next) = self.next_tokens(family.to_owned(), placeholder)?;
        let outcome = self
            .store
            .refresh(&token.hash(), client_id, self.now(), &next)
            .await
            .map_err(storage)?;
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
        // says what was kept). Asking for more than was granted is refused, but the token was
        // rotated already: its family goes, as the client must authorize again.
        if exceeds_grant(asked.as_deref(), &grant.scope) {
            self.store
                .revoke_token(&next.access.0, self.now())
                .await
                .map_err(storage)?;
            self.cache.forget_all().await;
            return Err(OAuthError::InvalidScope(format!(
                "the scope asked for exceeds the one granted ({}): authorize again",
                grant.scope
            )));
        }
        Ok(TokenAnswer::new(&access, &refresh, grant.scope))
    }

    /// A new access token and a refresh token of `family`, and what the store keeps of them.
    fn next_tokens(
        &self,
        family: String,
        grant: Grant,
    ) -> Result<(SecretToken, SecretToken, NewTokens), OAuthError> {
        let access = fresh_token()?;
        let random = fresh_token()?;
        let refresh = refresh_token(&family, &random).ok_or_else(|| {
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
}
