//! The authorization endpoint (RFC 6749 §4.1.1, OAuth 2.1): the client is resolved, the request
//! checked by the protocol's rules, the signed-in owner consents or refuses, and the browser goes
//! back to the client with a code or an error.

use toolgate_domain::AccountId;
use toolgate_oauth::token::family_id;
use toolgate_oauth::{
    AuthorizeError, AuthorizeParams, AuthorizeRequest, CODE_TTL, KnownClient, OAuthError,
};
use toolgate_store::{Grant, NewCode, StoreError};

use super::clients::ClientError;
use super::{AuthServer, fresh_token, millis, storage};

impl AuthServer {
    /// Checks an authorization request for `owner`, the signed-in account if there is one (a
    /// client metadata document is fetched only for a signed-in account, at most
    /// [`toolgate_oauth::DOCUMENT_FETCHES_PER_HOUR`] times an hour each). Until the client and
    /// its redirect URI are known to match, a refusal is [`AuthorizeError::NoRedirect`] (an
    /// error page); after that it is [`AuthorizeError::Redirect`], which may go back to the
    /// client with `error`, `state` and `iss` once the owner has signed in.
    pub async fn authorize(
        &self,
        params: &AuthorizeParams,
        owner: Option<&AccountId>,
    ) -> Result<AuthorizeRequest, AuthorizeError> {
        let client_id = params.required_client_id()?;
        let client = self
            .resolve_client(client_id, owner)
            .await
            .map_err(|err| match err {
                ClientError::Refused(message) => AuthorizeError::NoRedirect(message),
                ClientError::TooManyFetches(wait) => AuthorizeError::TooManyFetches(wait),
                ClientError::Unavailable => AuthorizeError::Unavailable,
            })?;
        AuthorizeRequest::check(
            &self.issuer,
            params,
            KnownClient {
                id: &client.client_id,
                name: &client.name,
                redirect_uris: &client.redirect_uris,
            },
        )
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
                family: family_id(&family),
                grant: Grant {
                    account: account.clone(),
                    client_id: request.client_id().to_owned(),
                    scope: request.scope().to_owned(),
                    resource: request.resource().to_owned(),
                },
                redirect_uri: request.redirect_uri().to_owned(),
                code_challenge: request.code_challenge().to_owned(),
                expires_at: now.saturating_add(millis(CODE_TTL)),
            })
            .await
            .map_err(|err| match err {
                StoreError::NotFound => OAuthError::InvalidRequest(
                    "the signed-in account no longer exists: sign in again".to_owned(),
                ),
                other => storage(other),
            })?;
        Ok(self.issuer.code_redirect(request, code.expose()))
    }

    /// The owner refused: the URL to send the browser to, with `error=access_denied`.
    pub fn deny(&self, request: &AuthorizeRequest) -> String {
        self.issuer.denied_redirect(request)
    }
}
