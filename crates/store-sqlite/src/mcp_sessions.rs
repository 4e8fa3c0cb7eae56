//! Legacy MCP sessions' rows. Times are this process's clock (`now_millis`), bound into each
//! statement: SQLite serves one host. `open` runs in one IMMEDIATE transaction on the writer, so
//! the per-account count and the insert are atomic against every other process's opens.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::AccountId;
use toolgate_store::{McpSessionOpened, McpSessionStore, StoreError, duration_millis, now_millis};

use crate::SqliteStore;
use crate::rows::{map_error, map_write_error};

#[async_trait]
impl McpSessionStore for SqliteStore {
    async fn open_mcp_session(
        &self,
        id: &str,
        owner: &AccountId,
        cap: u32,
        idle: Duration,
    ) -> Result<McpSessionOpened, StoreError> {
        let now = now_millis();
        let cutoff = now.saturating_sub(duration_millis(idle));
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        sqlx::query(
            "DELETE FROM mcp_sessions
             WHERE account_id = ?1 AND (closed_at IS NOT NULL OR last_used <= ?2)",
        )
        .bind(owner.as_str())
        .bind(cutoff)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM mcp_sessions WHERE account_id = ?1")
                .bind(owner.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(map_error)?;
        let mut opened = McpSessionOpened::Opened;
        if open >= i64::from(cap) {
            let oldest: Option<String> = sqlx::query_scalar(
                "UPDATE mcp_sessions SET closed_at = ?2 WHERE id = (
                     SELECT id FROM mcp_sessions WHERE account_id = ?1 AND closed_at IS NULL
                     ORDER BY last_used, id LIMIT 1)
                 RETURNING id",
            )
            .bind(owner.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_error)?;
            if let Some(oldest) = oldest {
                opened = McpSessionOpened::Replaced(oldest);
            }
        }
        sqlx::query(
            "INSERT INTO mcp_sessions (id, account_id, created_at, last_used)
             VALUES (?1, ?2, ?3, ?3)",
        )
        .bind(id)
        .bind(owner.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_write_error)?;
        tx.commit().await.map_err(map_error)?;
        Ok(opened)
    }

    async fn mcp_session_owner(
        &self,
        id: &str,
        idle: Duration,
    ) -> Result<Option<AccountId>, StoreError> {
        let cutoff = now_millis().saturating_sub(duration_millis(idle));
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT account_id FROM mcp_sessions
             WHERE id = ?1 AND closed_at IS NULL AND last_used > ?2",
        )
        .bind(id)
        .bind(cutoff)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        Ok(owner.map(AccountId::from_stored))
    }

    async fn renew_mcp_session(&self, id: &str) -> Result<Option<AccountId>, StoreError> {
        let owner: Option<String> = sqlx::query_scalar(
            "UPDATE mcp_sessions SET last_used = max(last_used, ?2)
             WHERE id = ?1 AND closed_at IS NULL RETURNING account_id",
        )
        .bind(id)
        .bind(now_millis())
        .fetch_optional(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(owner.map(AccountId::from_stored))
    }

    async fn touch_mcp_session(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE mcp_sessions SET last_used = max(last_used, ?2)
             WHERE id = ?1 AND closed_at IS NULL",
        )
        .bind(id)
        .bind(now_millis())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(())
    }

    async fn close_mcp_session(&self, id: &str, owner: &AccountId) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE mcp_sessions SET closed_at = ?3
             WHERE id = ?1 AND account_id = ?2 AND closed_at IS NULL",
        )
        .bind(id)
        .bind(owner.as_str())
        .bind(now_millis())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn close_mcp_sessions_of(&self, owner: &AccountId) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE mcp_sessions SET closed_at = ?2 WHERE account_id = ?1 AND closed_at IS NULL",
        )
        .bind(owner.as_str())
        .bind(now_millis())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn purge_mcp_sessions(&self, idle: Duration) -> Result<u64, StoreError> {
        let cutoff = now_millis().saturating_sub(duration_millis(idle));
        let done =
            sqlx::query("DELETE FROM mcp_sessions WHERE closed_at IS NOT NULL OR last_used <= ?1")
                .bind(cutoff)
                .execute(&self.writer)
                .await
                .map_err(map_error)?;
        Ok(done.rows_affected())
    }
}
