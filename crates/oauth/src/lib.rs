//! The OAuth 2.1 authorization server that guards `/mcp`, as pure logic over the store's traits:
//! the HTTP layer decodes requests into the values taken here and writes the answers out.
//!
//! - discovery: [`AuthServer::metadata`] (RFC 8414), [`AuthServer::resource_metadata`]
//!   (RFC 9728) and the `WWW-Authenticate` [`AuthServer::challenge`];
//! - clients: Client ID Metadata Documents (an https `client_id` naming its own metadata) and
//!   Dynamic Client Registration ([`AuthServer::register`], RFC 7591); every client is public
//!   and proves itself with PKCE S256;
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
mod error;
mod metadata;
mod register;
mod token;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use toolgate_app::owner::Limiter;
use toolgate_domain::{AccountId, SecretToken};
use toolgate_ports::web::Web;
use toolgate_store::{Store, now_millis};

pub use authorize::{AuthorizeParams, AuthorizeRequest};
pub use error::{AuthorizeError, ErrorRedirect, OAuthError, TokenError};
pub use token::TokenAnswer;
pub use toolgate_store::{AccessGrant, ConnectedApp, Grant};

/// The scope that lets a token use the three tools.
pub const SCOPE_MCP: &str = "mcp";
/// The scope a client asks for to be given refresh tokens (they are issued anyway).
pub const SCOPE_OFFLINE: &str = "offline_access";
/// Every scope this server grants.
pub const SCOPES: [&str; 2] = [SCOPE_MCP, SCOPE_OFFLINE];

/// How long an authorization code may be exchanged.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// How long an access token is accepted.
pub const ACCESS_TTL: Duration = Duration::from_secs(3600);
/// How long a refresh token may be used (each use rotates it).
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Client ID Metadata Documents one signed-in account may have fetched per hour: each fetch is
/// an outbound request and a stored client, made at the owner's say.
pub const DOCUMENT_FETCHES_PER_HOUR: u32 = 20;
/// A registered client (or a fetched metadata document's client) holding no live token and no
/// pending code is deleted once it is this old: registering is open to anyone.
pub const UNUSED_CLIENT_TTL: Duration = Duration::from_secs(24 * 3600);

/// The current time as Unix milliseconds; replaceable so that tests can move it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The authorization server of one service.
pub struct AuthServer {
    store: Arc<dyn Store>,
    web: Option<Arc<dyn Web>>,
    issuer: String,
    resource: String,
    clock: Clock,
    cache: bearer::Cache,
    /// Metadata-document fetches per signed-in account, within the hour.
    fetches: Limiter,
}

impl AuthServer {
    /// The server over `store`, fetching client metadata documents through `web` (none: such
    /// clients are refused), reachable at `public_url` (its issuer identifier).
    pub fn new(store: Arc<dyn Store>, web: Option<Arc<dyn Web>>, public_url: &str) -> Self {
        let issuer = public_url.trim_end_matches('/').to_owned();
        Self {
            store,
            web,
            resource: format!("{issuer}/mcp"),
            issuer,
            clock: Arc::new(now_millis),
            cache: bearer::Cache::default(),
            fetches: Limiter::new(DOCUMENT_FETCHES_PER_HOUR, Duration::from_secs(3600)),
        }
    }

    /// Replaces the clock (Unix ms), for tests and simulations that move time.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The issuer identifier: the public URL without a trailing slash.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The protected resource (RFC 8707) that tokens are issued for: `{issuer}/mcp`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The clients holding live tokens of the account, for the dashboard's "Connected apps".
    pub async fn connected_apps(
        &self,
        account: &AccountId,
    ) -> Result<Vec<ConnectedApp>, OAuthError> {
        self.store
            .connected_apps(account, self.now())
            .await
            .map_err(error::storage)
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
            .map_err(error::storage)?;
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
