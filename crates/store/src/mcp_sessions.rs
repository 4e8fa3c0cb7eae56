//! Legacy MCP sessions (`Mcp-Session-Id`) as rows, so that every front end on one database can
//! serve any of them. A row is an id, its owner, when it was opened and last used, and whether
//! it was closed. Times are the store's clock: the database's on PostgreSQL (front ends on
//! several hosts agree), the process's on SQLite (one host). A session is open while its row is
//! not closed and was used within the idle limit the caller passes; `last_used` is written
//! lazily by the front ends, so callers add their write-back interval to that limit.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::AccountId;

use crate::StoreError;

/// What [`McpSessionStore::open_mcp_session`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpSessionOpened {
    /// The session was recorded; the account had room.
    Opened,
    /// The session was recorded after the account's longest-idle open session (this id) was
    /// closed to make room under the cap.
    Replaced(String),
}

/// Legacy MCP sessions shared by the front ends of one database.
#[async_trait]
pub trait McpSessionStore: Send + Sync {
    /// Records session `id` of `owner`, open and used now. When `owner` already has `cap` open
    /// sessions (used within `idle`), its longest-idle one is closed first and named in the
    /// answer. Rows of `owner` closed or idle for longer than `idle` are deleted on the way.
    /// `Err(Conflict)`: the id is taken.
    async fn open_mcp_session(
        &self,
        id: &str,
        owner: &AccountId,
        cap: u32,
        idle: Duration,
    ) -> Result<McpSessionOpened, StoreError>;

    /// The owner of session `id` if it is open: not closed and used within `idle`.
    async fn mcp_session_owner(
        &self,
        id: &str,
        idle: Duration,
    ) -> Result<Option<AccountId>, StoreError>;

    /// The owner of session `id` unless it was closed, recording it used now whatever its last
    /// use: the caller knows it in use (a cached session with a call that outlasted the idle
    /// limit must not be lost). A purged row is gone for good.
    async fn renew_mcp_session(&self, id: &str) -> Result<Option<AccountId>, StoreError>;

    /// Records that open session `id` was used now (a front end's lazy write-back).
    async fn touch_mcp_session(&self, id: &str) -> Result<(), StoreError>;

    /// Closes `owner`'s session `id`; `false` when it had no such open session.
    async fn close_mcp_session(&self, id: &str, owner: &AccountId) -> Result<bool, StoreError>;

    /// Closes every open session of `owner` (its key was rotated); returns how many.
    async fn close_mcp_sessions_of(&self, owner: &AccountId) -> Result<u64, StoreError>;

    /// Deletes every row closed, or idle for longer than `idle`; returns how many.
    async fn purge_mcp_sessions(&self, idle: Duration) -> Result<u64, StoreError>;
}

/// A duration as the milliseconds the store's time columns count, saturating.
pub fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
