//! The OAuth 2.1 authorization server that guards `/mcp`, as use cases over the store, the web
//! port and a clock; the protocol's rules are `toolgate-oauth`'s, and the HTTP layer decodes
//! requests into the values taken here and writes the answers out.
//!
//! - discovery: [`AuthServer::metadata`] (RFC 8414), [`AuthServer::resource_metadata`]
//!   (RFC 9728) and the `WWW-Authenticate` [`AuthServer::challenge`];
//! - clients: Client ID Metadata Documents (an https `client_id` naming its own metadata,
//!   fetched through the Fetcher port) and Dynamic Client Registration ([`AuthServer::register`],
//!   RFC 7591, limited per client address); every client is public and proves itself with PKCE
//!   S256;
//! - the code flow: [`AuthServer::authorize`], then [`AuthServer::approve`] or
//!   [`AuthServer::deny`] once the signed-in owner has answered the consent page, then
//!   [`AuthServer::token`] (codes and rotating refresh tokens) and [`AuthServer::revoke`];
//! - the resource side: [`AuthServer::authenticate`] checks a bearer token's life, audience and
//!   scope.
//!
//! Codes and tokens are [`SecretToken`]s (256 random bits); storage keeps only their SHA-256.

mod authorize;
mod bearer;
mod clients;
mod register;
mod token;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::{AccountId, SecretToken};
use toolgate_oauth::{DOCUMENT_FETCHES_PER_HOUR, Issuer, OAuthError, REGISTRATIONS_PER_HOUR};
use toolgate_ports::fetch::Fetcher;
use toolgate_store::{Store, StoreError, now_millis};

pub use toolgate_store::{ConnectedApp, Grant};

use crate::limiter::Limiter;

/// The current time as Unix milliseconds; replaceable so that tests can move it.
pub(crate) type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The window of the per-account and per-address limits.
const LIMIT_WINDOW: Duration = Duration::from_secs(3600);

/// The authorization server of one service.
pub struct AuthServer {
    store: Arc<dyn Store>,
    fetcher: Option<Arc<dyn Fetcher>>,
    issuer: Issuer,
    clock: Clock,
    cache: bearer::Cache,
    /// Metadata-document fetches per signed-in account, within the hour.
    fetches: Limiter,
    /// Dynamic client registrations per client address, within the hour.
    registrations: Limiter,
}

impl AuthServer {
    /// The server over `store`, fetching client metadata documents through `web` (none: such
    /// clients are refused), reachable at `public_url` (its issuer identifier).
    pub(crate) fn new(
        store: Arc<dyn Store>,
        fetcher: Option<Arc<dyn Fetcher>>,
        public_url: &str,
    ) -> Self {
        Self {
            store,
            fetcher,
            issuer: Issuer::new(public_url),
            clock: Arc::new(now_millis),
            cache: bearer::Cache::default(),
            fetches: Limiter::new(DOCUMENT_FETCHES_PER_HOUR, LIMIT_WINDOW),
            registrations: Limiter::new(REGISTRATIONS_PER_HOUR, LIMIT_WINDOW),
        }
    }

    /// Replaces the clock (Unix ms), for tests that move time.
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The issuer identifier: the public URL without a trailing slash.
    pub fn issuer(&self) -> &str {
        self.issuer.id()
    }

    /// The protected resource (RFC 8707) that tokens are issued for: `{issuer}/mcp`.
    pub fn resource(&self) -> &str {
        self.issuer.resource()
    }

    /// Authorization server metadata (RFC 8414).
    pub fn metadata(&self) -> serde_json::Value {
        self.issuer.metadata()
    }

    /// Protected resource metadata (RFC 9728) of `/mcp`.
    pub fn resource_metadata(&self) -> serde_json::Value {
        self.issuer.resource_metadata()
    }

    /// The `WWW-Authenticate` value of a 401 from `/mcp`, with `error` when a token was refused.
    pub fn challenge(&self, error: Option<&str>) -> String {
        self.issuer.challenge(error)
    }

    /// The clients holding live tokens of the account, for the dashboard's "Connected apps".
    pub async fn connected_apps(
        &self,
        account: &AccountId,
    ) -> Result<Vec<ConnectedApp>, OAuthError> {
        self.store
            .connected_apps(account, self.now())
            .await
            .map_err(storage)
    }

    /// Disconnects an app: revokes every token the account granted `client_id`, at once in this
    /// process; returns how many tokens went.
    pub async fn revoke_client(
        &self,
        account: &AccountId,
        client_id: &str,
    ) -> Result<u64, OAuthError> {
        let gone = self
            .store
            .revoke_client(account, client_id, self.now())
            .await
            .map_err(storage)?;
        self.cache.forget_client(account, client_id).await;
        Ok(gone)
    }

    /// The clock's time (Unix ms).
    fn now(&self) -> i64 {
        (self.clock)()
    }
}

/// A fresh random token, or the failure the caller answers with.
fn fresh_token() -> Result<SecretToken, OAuthError> {
    SecretToken::generate().map_err(|err| {
        tracing::error!(error = %err, "oauth: no randomness");
        OAuthError::ServerError("the service could not draw a random token".to_owned())
    })
}

/// A span as milliseconds, the unit of every stored time.
fn millis(span: Duration) -> i64 {
    i64::try_from(span.as_millis()).unwrap_or(i64::MAX)
}

/// Turns a storage failure into the wire error, logging its detail (which the wire never shows).
fn storage(err: StoreError) -> OAuthError {
    match err {
        StoreError::Unavailable(detail) => {
            tracing::error!(error = %detail, "oauth: storage unavailable");
            OAuthError::TemporarilyUnavailable(
                "the service cannot reach its storage right now; retry in a moment".to_owned(),
            )
        }
        other => {
            tracing::error!(error = %other, "oauth: unexpected storage answer");
            OAuthError::ServerError("the service failed to complete the request".to_owned())
        }
    }
}
