//! Which client is asking: a Client ID Metadata Document (an https `client_id` that names its
//! own metadata, fetched through the Fetcher port and kept for a day) or a client registered with
//! RFC 7591; and the purge of clients nobody uses.

use std::time::Duration;

use toolgate_domain::AccountId;
use toolgate_oauth::document::{self, DOCUMENT_TTL, MAX_DOCUMENT_BYTES};
use toolgate_oauth::{OAuthError, UNUSED_CLIENT_TTL};
use toolgate_ports::fetch::{FetchRequest, Method, PageContent};
use toolgate_store::{OAuthClient, StoreError};

use super::{AuthServer, millis, storage};

/// Why a client could not be resolved.
#[derive(Debug)]
pub(super) enum ClientError {
    /// Unknown, or its metadata is unacceptable: the message says which (it shows no secret).
    Refused(String),
    /// The signed-in account has had its hourly share of document fetches; the wait.
    TooManyFetches(Duration),
    /// Storage failed (logged).
    Unavailable,
}

impl AuthServer {
    /// The client named `client_id`: an https URL is a metadata document (fetched, if need be,
    /// for the signed-in `owner` only), anything else a registered client.
    pub(super) async fn resolve_client(
        &self,
        client_id: &str,
        owner: Option<&AccountId>,
    ) -> Result<OAuthClient, ClientError> {
        if client_id.starts_with("https://") {
            return self.document_client(client_id, owner).await;
        }
        match self.store.client(client_id).await {
            Ok(Some(client)) => Ok(client),
            Ok(None) => Err(ClientError::Refused(
                "this client is unknown to the service: the app must register again (or use a \
                 client metadata document)"
                    .to_owned(),
            )),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// The client whose metadata document is at `url`: the stored copy if fetched within a
    /// day, else fetched now through the Fetcher port for `owner` (counted against the account's
    /// hourly fetches, failed ones included), checked and stored.
    async fn document_client(
        &self,
        url: &str,
        owner: Option<&AccountId>,
    ) -> Result<OAuthClient, ClientError> {
        document::check_url(url).map_err(ClientError::Refused)?;
        let now = self.now();
        match self.store.client(url).await {
            Ok(Some(stored))
                if stored.updated_at <= now && now - stored.updated_at < millis(DOCUMENT_TTL) =>
            {
                return Ok(stored);
            }
            Ok(_) => {}
            Err(err) => return Err(unavailable(err)),
        }
        let Some(fetcher) = &self.fetcher else {
            return Err(ClientError::Refused(
                "this service does not fetch client metadata documents: the app must register \
                 itself instead"
                    .to_owned(),
            ));
        };
        // a fetch is an outbound request and a stored client: only at a signed-in owner's say,
        // and a bounded number of times
        let Some(owner) = owner else {
            return Err(ClientError::Refused(
                "the app's client metadata document is read only for a signed-in owner: sign in \
                 to the dashboard, then start the connection again from your app"
                    .to_owned(),
            ));
        };
        self.fetches
            .count(owner.as_str())
            .map_err(ClientError::TooManyFetches)?;
        let refused = |why: &str| {
            ClientError::Refused(format!("the client's metadata document at {url} {why}"))
        };
        let page = fetcher
            .send(FetchRequest {
                method: Method::Get,
                url: url.to_owned(),
                headers: vec![("Accept".to_owned(), "application/json".to_owned())],
                body: None,
                body_holds_secret: false,
                max_bytes: MAX_DOCUMENT_BYTES,
            })
            .await
            .map_err(|err| refused(&format!("could not be fetched: {err}")))?;
        if page.status != 200 {
            return Err(refused(&format!("answered HTTP {}", page.status)));
        }
        // the document must live at its own id: a redirect could lead to anyone's document
        if page.final_url != url {
            return Err(refused(
                "redirected elsewhere; it must be served at its client_id",
            ));
        }
        if page.truncated || page.bytes > MAX_DOCUMENT_BYTES {
            return Err(refused(&format!(
                "is larger than {} KiB",
                MAX_DOCUMENT_BYTES / 1024
            )));
        }
        let PageContent::Text { text, .. } = page.content else {
            return Err(refused("is not JSON"));
        };
        let read = document::read(url, &text).map_err(|why| refused(&why))?;
        let client = OAuthClient {
            client_id: url.to_owned(),
            name: read.name,
            redirect_uris: read.redirect_uris,
            updated_at: now,
        };
        self.store.put_client(&client).await.map_err(unavailable)?;
        tracing::info!(client_id = %url, "oauth: client metadata document fetched");
        Ok(client)
    }

    /// Deletes the clients stored more than [`UNUSED_CLIENT_TTL`] ago that no account holds a
    /// live token or a pending code of; how many went. Anyone may register a client (and a
    /// signed-in owner have documents fetched), so the unused ones must not pile up. An app whose
    /// client went registers again (or its document is fetched again).
    pub async fn purge_unused_clients(&self) -> Result<u64, OAuthError> {
        let now = self.now();
        let stored_before = now.saturating_sub(millis(UNUSED_CLIENT_TTL));
        self.store
            .purge_clients(stored_before, now)
            .await
            .map_err(storage)
    }
}

/// Logs a storage failure of the client look-up.
fn unavailable(err: StoreError) -> ClientError {
    tracing::error!(error = %err, "oauth: client look-up failed");
    ClientError::Unavailable
}
