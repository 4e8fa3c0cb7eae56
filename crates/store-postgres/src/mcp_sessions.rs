//! Legacy MCP sessions' rows. Times are the server's clock (`placement_now_ms()`), read inside
//! each statement, so front ends on several hosts judge idleness alike. `open` locks the
//! account's row first, so concurrent opens of one account through several front ends count
//! one after another and the cap holds across them.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::AccountId;
use toolgate_store::{McpSessionOpened, McpSessionStore, StoreError, duration_millis};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

#[async_trait]
impl McpSessionStore for PgStore {
    async fn open_mcp_session(
        &self,
        id: &str,
        owner: &AccountId,
        cap: u32,
        idle: Duration,
    ) -> Result<McpSessionOpened, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE")
                .bind(owner.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_error)?;
        if exists.is_none() {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "DELETE FROM mcp_sessions
             WHERE account_id = $1
                 AND (closed_at IS NOT NULL OR last_used <= placement_now_ms() - $2)",
        )
        .bind(owner.as_str())
        .bind(duration_millis(idle))
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM mcp_sessions WHERE account_id = $1")
                .bind(owner.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(map_error)?;
        let mut opened = McpSessionOpened::Opened;
        if open >= i64::from(cap) {
            let oldest: Option<String> = sqlx::query_scalar(
                "UPDATE mcp_sessions SET closed_at = placement_now_ms() WHERE id = (
                     SELECT id FROM mcp_sessions WHERE account_id = $1 AND closed_at IS NULL
                     ORDER BY last_used, id LIMIT 1)
                 RETURNING id",
            )
            .bind(owner.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_error)?;
            if let Some(oldest) = oldest {
                opened = McpSessionOpened::Replaced(oldest);
            }
        }
        sqlx::query(
            "INSERT INTO mcp_sessions (id, account_id, created_at, last_used)
             SELECT $1, $2, t.now, t.now FROM (SELECT placement_now_ms() AS now) t",
        )
        .bind(id)
        .bind(owner.as_str())
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
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT account_id FROM mcp_sessions
             WHERE id = $1 AND closed_at IS NULL AND last_used > placement_now_ms() - $2",
        )
        .bind(id)
        .bind(duration_millis(idle))
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(owner.map(AccountId::from_stored))
    }

    async fn renew_mcp_session(&self, id: &str) -> Result<Option<AccountId>, StoreError> {
        let owner: Option<String> = sqlx::query_scalar(
            "UPDATE mcp_sessions SET last_used = greatest(last_used, placement_now_ms())
             WHERE id = $1 AND closed_at IS NULL RETURNING account_id",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(owner.map(AccountId::from_stored))
    }

    async fn touch_mcp_session(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE mcp_sessions SET last_used = greatest(last_used, placement_now_ms())
             WHERE id = $1 AND closed_at IS NULL",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(())
    }

    async fn close_mcp_session(&self, id: &str, owner: &AccountId) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE mcp_sessions SET closed_at = placement_now_ms()
             WHERE id = $1 AND account_id = $2 AND closed_at IS NULL",
        )
        .bind(id)
        .bind(owner.as_str())
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn close_mcp_sessions_of(&self, owner: &AccountId) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE mcp_sessions SET closed_at = placement_now_ms()
             WHERE account_id = $1 AND closed_at IS NULL",
        )
        .bind(owner.as_str())
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn purge_mcp_sessions(&self, idle: Duration) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM mcp_sessions
             WHERE closed_at IS NOT NULL OR last_used <= placement_now_ms() - $1",
        )
        .bind(duration_millis(idle))
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }
}
