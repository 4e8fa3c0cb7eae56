//! Legacy MCP sessions' records in the store, so that any front end on one database serves a
//! session another opened. The front end keeps its own table as a cache in front of these (see
//! the server's `mcp_sessions`); this is only the store's side, without HTTP.

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::AccountId;
use toolgate_store::{McpSessionOpened, Store, StoreError};

/// The store failed; the detail is for logs only.
#[derive(Debug, thiserror::Error)]
#[error("the MCP session records could not be reached")]
pub struct McpSessionError(#[source] StoreError);

/// Legacy MCP sessions as the store holds them.
pub struct McpSessionRecords {
    store: Arc<dyn Store>,
}

impl McpSessionRecords {
    /// Over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Records session `id` of `owner`; at `cap` open sessions the account's longest-idle one
    /// is closed, and its id returned, to make room.
    pub async fn open(
        &self,
        id: &str,
        owner: &AccountId,
        cap: usize,
        idle: Duration,
    ) -> Result<Option<String>, McpSessionError> {
        let cap = u32::try_from(cap).unwrap_or(u32::MAX);
        match self.store.open_mcp_session(id, owner, cap, idle).await {
            Ok(McpSessionOpened::Opened) => Ok(None),
            Ok(McpSessionOpened::Replaced(closed)) => Ok(Some(closed)),
            Err(error) => Err(McpSessionError(error)),
        }
    }

    /// The owner of session `id` if it is open (not closed, used within `idle`).
    pub async fn owner(
        &self,
        id: &str,
        idle: Duration,
    ) -> Result<Option<AccountId>, McpSessionError> {
        self.store
            .mcp_session_owner(id, idle)
            .await
            .map_err(McpSessionError)
    }

    /// The owner of session `id` unless it was closed, recording it used now: for a session
    /// this front end holds in use, whatever its stored last use.
    pub async fn renew(&self, id: &str) -> Result<Option<AccountId>, McpSessionError> {
        self.store
            .renew_mcp_session(id)
            .await
            .map_err(McpSessionError)
    }

    /// Records that session `id` was used now.
    pub async fn touch(&self, id: &str) -> Result<(), McpSessionError> {
        self.store
            .touch_mcp_session(id)
            .await
            .map_err(McpSessionError)
    }

    /// Closes `owner`'s session `id`; `false` when there was no such open session.
    pub async fn close(&self, id: &str, owner: &AccountId) -> Result<bool, McpSessionError> {
        self.store
            .close_mcp_session(id, owner)
            .await
            .map_err(McpSessionError)
    }

    /// Closes every open session of `owner`; returns how many.
    pub async fn close_all(&self, owner: &AccountId) -> Result<u64, McpSessionError> {
        self.store
            .close_mcp_sessions_of(owner)
            .await
            .map_err(McpSessionError)
    }

    /// Deletes the records closed, or idle for longer than `idle`; returns how many.
    pub async fn purge(&self, idle: Duration) -> Result<u64, McpSessionError> {
        self.store
            .purge_mcp_sessions(idle)
            .await
            .map_err(McpSessionError)
    }
}
