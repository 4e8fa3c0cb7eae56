//! What the OAuth authorization server stores: clients, codes and token families, and the
//! primitives `toolgate-store` spends codes and refresh tokens over (the rule is
//! `toolgate-oauth`'s): a credential's state read, and its next stage written by
//! compare-and-set. Writes go through the writer connection, each that reads before it writes
//! in a `BEGIN IMMEDIATE` transaction; with the single writer that serialises every change to a
//! family, so a revocation and the tokens added to the family never interleave. Reads go
//! through the reader pool. Codes and tokens arrive hashed, and no error carries a hash.

use async_trait::async_trait;
use sqlx::SqliteConnection;
use toolgate_domain::{AccountId, Via};
use toolgate_store::{
    AccessGrant, Advance, CodeColumns, ConnectedApp, Grant, LiveTokenGroup, NewCode, NewTokens,
    OAuthClient, OAuthStore, RefreshColumns, StoreError, StoredCode, StoredRefresh, TokenHash,
    account_from_columns, connected_apps_from_groups, now_millis, redirect_uris_from_column,
    redirect_uris_to_column,
};

use crate::SqliteStore;
use crate::rows::{map_error, map_write_error};

/// A live access token joined with its account: id, email, tier, client, scope, resource, expiry.
type AccessRow = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    String,
    String,
    String,
    i64,
);

#[async_trait]
impl OAuthStore for SqliteStore {
    async fn put_client(&self, client: &OAuthClient) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oauth_clients (client_id, name, redirect_uris, updated_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (client_id) DO UPDATE SET name = excluded.name,
                 redirect_uris = excluded.redirect_uris, updated_at = excluded.updated_at",
        )
        .bind(&client.client_id)
        .bind(&client.name)
        .bind(redirect_uris_to_column(&client.redirect_uris))
        .bind(client.updated_at)
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(())
    }

    async fn client(&self, client_id: &str) -> Result<Option<OAuthClient>, StoreError> {
        let row: Option<(String, String, String, i64)> = sqlx::query_as(
            "SELECT client_id, name, redirect_uris, updated_at FROM oauth_clients
             WHERE client_id = ?1",
        )
        .bind(client_id)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        row.map(|(client_id, name, uris, updated_at)| {
            Ok(OAuthClient {
                client_id,
                name,
                redirect_uris: redirect_uris_from_column(&uris)?,
                updated_at,
            })
        })
        .transpose()
    }

    async fn put_code(&self, code: &NewCode) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, family, account_id, client_id, scope, resource,
                 redirect_uri, code_challenge, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .bind(&code.code_hash[..])
        .bind(&code.family)
        .bind(code.grant.account.as_str())
        .bind(&code.grant.client_id)
        .bind(&code.grant.scope)
        .bind(&code.grant.resource)
        .bind(&code.redirect_uri)
        .bind(&code.code_challenge)
        .bind(code.expires_at)
        .execute(&self.writer)
        .await
        .map_err(map_write_error)?;
        Ok(())
    }

    async fn code_state(&self, code_hash: &TokenHash) -> Result<Option<StoredCode>, StoreError> {
        let row: Option<CodeColumns> = sqlx::query_as(
            "SELECT family, account_id, client_id, scope, resource, redirect_uri, code_challenge,
                    expires_at, used_at, revoked_at
             FROM oauth_codes WHERE code_hash = ?1",
        )
        .bind(&code_hash[..])
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        Ok(row.map(StoredCode::from_columns))
    }

    async fn advance_code(&self, change: &Advance<'_>) -> Result<bool, StoreError> {
        // IMMEDIATE: the comparison, the write and the family's revocation are one step.
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        let family: Option<String> = sqlx::query_scalar(
            "UPDATE oauth_codes
             SET used_at = CASE WHEN ?4 THEN COALESCE(used_at, ?6) ELSE used_at END,
                 revoked_at = CASE WHEN ?5 THEN COALESCE(revoked_at, ?6) ELSE revoked_at END
             WHERE code_hash = ?1
               AND (used_at IS NOT NULL) = ?2 AND (revoked_at IS NOT NULL) = ?3
             RETURNING family",
        )
        .bind(&change.hash[..])
        .bind(change.seen.used)
        .bind(change.seen.revoked)
        .bind(change.next.used)
        .bind(change.next.revoked)
        .bind(change.now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_error)?;
        let Some(family) = family else {
            return Ok(false);
        };
        if change.revoke_family {
            revoke_family(&mut tx, &family, change.now).await?;
        }
        tx.commit().await.map_err(map_error)?;
        Ok(true)
    }
    async fn put_tokens(&self, tokens: &NewTokens) -> Result<(), StoreError> {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        insert_tokens(&mut tx, &tokens.family, &tokens.grant, tokens).await?;
        tx.commit().await.map_err(map_error)
    }

    async fn find_access(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<AccessGrant>, StoreError> {
        let row: Option<AccessRow> = sqlx::query_as(
            "SELECT a.id, a.email, a.tier, a.cap_month_micros, a.cap_day_micros, t.client_id, t.scope, t.resource, t.expires_at
             FROM oauth_tokens t JOIN accounts a ON a.id = t.account_id
             WHERE t.token_hash = ?1 AND t.kind = 'access' AND t.revoked_at IS NULL
               AND t.expires_at > ?2",
        )
        .bind(&token_hash[..])
        .bind(now)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        row.map(
            |(id, email, tier, month, day, client_id, scope, resource, expires_at)| {
                let mut account = account_from_columns(id, &email, tier, (month, day))?;
                account.via = Via::OAuth {
                    client_id: client_id.clone(),
                };
                Ok(AccessGrant {
                    grant: Grant {
                        account: account.id.clone(),
                        client_id,
                        scope,
                        resource,
                    },
                    account,
                    expires_at,
                })
            },
        )
        .transpose()
    }

    async fn refresh_state(
        &self,
        token_hash: &TokenHash,
        client_id: &str,
    ) -> Result<Option<StoredRefresh>, StoreError> {
        let row: Option<RefreshColumns> = sqlx::query_as(
            "SELECT family, account_id, client_id, scope, resource, expires_at, used_at,
                    revoked_at
             FROM oauth_tokens WHERE token_hash = ?1 AND kind = 'refresh' AND client_id = ?2",
        )
        .bind(&token_hash[..])
        .bind(client_id)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        Ok(row.map(StoredRefresh::from_columns))
    }

    async fn advance_refresh(
        &self,
        change: &Advance<'_>,
        issue: Option<&NewTokens>,
    ) -> Result<bool, StoreError> {
        // IMMEDIATE, and everything below in it: with the single writer, a revocation and the
        // tokens added to the family never interleave.
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        let family: Option<String> = sqlx::query_scalar(
            "UPDATE oauth_tokens
             SET used_at = CASE WHEN ?4 THEN COALESCE(used_at, ?6) ELSE used_at END,
                 revoked_at = CASE WHEN ?5 THEN COALESCE(revoked_at, ?6) ELSE revoked_at END
             WHERE token_hash = ?1 AND kind = 'refresh'
               AND (used_at IS NOT NULL) = ?2 AND (revoked_at IS NOT NULL) = ?3
             RETURNING family",
        )
        .bind(&change.hash[..])
        .bind(change.seen.used)
        .bind(change.seen.revoked)
        .bind(change.next.used)
        .bind(change.next.revoked)
        .bind(change.now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_error)?;
        let Some(family) = family else {
            return Ok(false);
        };
        if change.revoke_family {
            revoke_family(&mut tx, &family, change.now).await?;
        }
        if let Some(tokens) = issue {
            insert_tokens(&mut tx, &family, &tokens.grant, tokens).await?;
        }
        tx.commit().await.map_err(map_error)?;
        Ok(true)
    }
    async fn revoke_token(&self, token_hash: &TokenHash, now: i64) -> Result<bool, StoreError> {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        let family: Option<String> =
            sqlx::query_scalar("SELECT family FROM oauth_tokens WHERE token_hash = ?1")
                .bind(&token_hash[..])
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_error)?;
        let Some(family) = family else {
            return Ok(false);
        };
        revoke_family(&mut tx, &family, now).await?;
        tx.commit().await.map_err(map_error)?;
        Ok(true)
    }

    async fn revoke_client(
        &self,
        account: &AccountId,
        client_id: &str,
        now: i64,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        let tokens = sqlx::query(
            "UPDATE oauth_tokens SET revoked_at = ?3
             WHERE account_id = ?1 AND client_id = ?2 AND revoked_at IS NULL",
        )
        .bind(account.as_str())
        .bind(client_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        // Its pending codes too, so that none starts a new family after the disconnection.
        sqlx::query(
            "UPDATE oauth_codes SET revoked_at = ?3
             WHERE account_id = ?1 AND client_id = ?2 AND revoked_at IS NULL",
        )
        .bind(account.as_str())
        .bind(client_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        let revoked = tokens.rows_affected();
        tx.commit().await.map_err(map_error)?;
        Ok(revoked)
    }

    async fn connected_apps(
        &self,
        account: &AccountId,
        now: i64,
    ) -> Result<Vec<ConnectedApp>, StoreError> {
        let groups: Vec<LiveTokenGroup> = sqlx::query_as(
            "SELECT t.client_id, c.name, t.scope, MIN(t.created_at)
             FROM oauth_tokens t LEFT JOIN oauth_clients c ON c.client_id = t.client_id
             WHERE t.account_id = ?1 AND t.revoked_at IS NULL AND t.expires_at > ?2
             GROUP BY t.client_id, c.name, t.scope",
        )
        .bind(account.as_str())
        .bind(now)
        .fetch_all(&self.reader)
        .await
        .map_err(map_error)?;
        Ok(connected_apps_from_groups(groups))
    }

    async fn purge_clients(&self, stored_before: i64, now: i64) -> Result<u64, StoreError> {
        let purged = sqlx::query(
            "DELETE FROM oauth_clients
             WHERE updated_at < ?1
               AND NOT EXISTS (SELECT 1 FROM oauth_tokens t
                   WHERE t.client_id = oauth_clients.client_id
                     AND t.revoked_at IS NULL AND t.expires_at > ?2)
               AND NOT EXISTS (SELECT 1 FROM oauth_codes o
                   WHERE o.client_id = oauth_clients.client_id
                     AND o.used_at IS NULL AND o.revoked_at IS NULL AND o.expires_at > ?2)",
        )
        .bind(stored_before)
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(purged.rows_affected())
    }
}

/// Stores the access and refresh tokens of `tokens` into `family` under `grant`, created now;
/// into a revoked family (its code or any of its tokens revoked) they are stored revoked.
async fn insert_tokens(
    conn: &mut SqliteConnection,
    family: &str,
    grant: &Grant,
    tokens: &NewTokens,
) -> Result<(), StoreError> {
    let created_at = now_millis();
    let access = std::iter::once(("access", &tokens.access));
    for (kind, (hash, expires_at)) in access.chain(tokens.refresh.iter().map(|r| ("refresh", r))) {
        sqlx::query(
            "INSERT INTO oauth_tokens (token_hash, kind, family, account_id, client_id, scope,
                 resource, created_at, expires_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,
                 (SELECT MIN(at) FROM (
                      SELECT revoked_at AS at FROM oauth_codes WHERE family = ?3
                      UNION ALL SELECT revoked_at FROM oauth_tokens WHERE family = ?3
                  ) AS revoked))",
        )
        .bind(&hash[..])
        .bind(kind)
        .bind(family)
        .bind(grant.account.as_str())
        .bind(&grant.client_id)
        .bind(&grant.scope)
        .bind(&grant.resource)
        .bind(created_at)
        .bind(*expires_at)
        .execute(&mut *conn)
        .await
        .map_err(map_write_error)?;
    }
    Ok(())
}

/// Revokes every token of the family and its code, those revoked already keeping their time.
async fn revoke_family(
    conn: &mut SqliteConnection,
    family: &str,
    now: i64,
) -> Result<(), StoreError> {
    for statement in [
        "UPDATE oauth_tokens SET revoked_at = ?2 WHERE family = ?1 AND revoked_at IS NULL",
        "UPDATE oauth_codes SET revoked_at = ?2 WHERE family = ?1 AND revoked_at IS NULL",
    ] {
        sqlx::query(statement)
            .bind(family)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(map_error)?;
    }
    Ok(())
}
