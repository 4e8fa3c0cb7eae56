//! Dynamic Client Registration (RFC 7591): open to anyone, so limited per client address, and
//! every registered client is stored until it goes unused (see
//! [`AuthServer::purge_unused_clients`]).

use std::net::IpAddr;

use serde_json::Value;
use toolgate_oauth::{OAuthError, Registration};
use toolgate_store::OAuthClient;

use super::{AuthServer, fresh_token, storage};
use crate::limiter::client_key;

impl AuthServer {
    /// Registers a client for the caller at `client` (RFC 7591 §3): `body` is the JSON request;
    /// the answer is the client information response (RFC 7591 §3.2.1, status 201). A client
    /// address past [`toolgate_oauth::REGISTRATIONS_PER_HOUR`] within the hour is refused with
    /// `temporarily_unavailable`, and nothing is stored.
    pub async fn register(&self, client: IpAddr, body: &[u8]) -> Result<Value, OAuthError> {
        if let Err(wait) = self.registrations.count(&client_key(client)) {
            return Err(OAuthError::TemporarilyUnavailable(format!(
                "too many client registrations from this address; retry in {} s",
                wait.as_secs().max(1)
            )));
        }
        let registration = Registration::parse(body)?;
        let token = fresh_token()?;
        let client_id = format!("tgc_{}", token.expose().get(..32).unwrap_or_default());
        let now = self.now();
        self.store
            .put_client(&OAuthClient {
                client_id: client_id.clone(),
                name: registration.name.clone(),
                redirect_uris: registration.redirect_uris.clone(),
                updated_at: now,
            })
            .await
            .map_err(storage)?;
        tracing::info!(client_id = %client_id, "oauth: client registered");
        Ok(registration.answer(&client_id, now / 1000))
    }
}
