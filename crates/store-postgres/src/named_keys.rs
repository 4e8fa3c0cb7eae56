//! The accounts' named keys: rows of `api_keys`. A write that changes what a key may do
//! notifies the key epoch's channel in its own transaction, as a rotation does (see
//! `replace_key`), so every store's key cache hears of it when it commits.

use async_trait::async_trait;
use toolgate_domain::{Account, AccountId, KeyHash, KeyId, Via};
use toolgate_store::{
    KeyChange, KeyColumns, KeyRecord, NamedKeys, NewNamedKey, StoreError, account_from_columns,
    key_columns, key_hash_from_column, key_record_from_columns, lines_to_column,
    named_key_from_columns, now_millis,
};

use sqlx::{Postgres, Transaction};

use crate::PgStore;
use crate::key_epoch;
use crate::rows::{map_error, map_write_error};

/// An account and the live named key that authenticated it, as one row.
type KeyAuthColumns = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Vec<u8>,
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
);

impl PgStore {
    /// The account of the live named key hashing to `hash`, by the unique index on the hash.
    pub(crate) async fn find_by_named_key(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Account, KeyHash)>, StoreError> {
        let row: Option<KeyAuthColumns> = sqlx::query_as(
            "SELECT a.id, a.email, a.tier, a.cap_month_micros, a.cap_day_micros, k.key_hash,
                    k.id, k.name, k.scope_tools, k.scope_fields, k.cap_month_micros,
                    k.cap_day_micros
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
        )
        .bind(&hash.as_bytes()[..])
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        row.map(|columns| {
            let (
                id,
                email,
                tier,
                month,
                day,
                stored,
                key_id,
                name,
                tools,
                fields,
                key_month,
                key_day,
            ) = columns;
            let mut account = account_from_columns(id, &email, tier, (month, day))?;
            account.via = Via::NamedKey(named_key_from_columns(
                key_id,
                name,
                (&tools, &fields),
                (key_month, key_day),
            ));
            Ok((account, key_hash_from_column(&stored)?))
        })
        .transpose()
    }

    async fn key_of(&self, account: &AccountId, id: &KeyId) -> Result<KeyRecord, StoreError> {
        let row: Option<KeyColumns> = sqlx::query_as(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys WHERE id = $1 AND account_id = $2"
        ))
        .bind(id.as_str())
        .bind(account.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        row.map(key_record_from_columns).ok_or(StoreError::NotFound)
    }

    /// Notifies the key epoch's channel in `tx` and commits it; this store's epoch moves on at
    /// once, also when the outcome is unknown.
    async fn commit_bumping(&self, mut tx: Transaction<'_, Postgres>) -> Result<(), StoreError> {
        let committed = async {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(key_epoch::CHANNEL)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        }
        .await;
        self.key_epoch.rotated();
        committed.map_err(map_error)
    }
}

#[async_trait]
impl NamedKeys for PgStore {
    async fn create_named_key(&self, key: &NewNamedKey<'_>) -> Result<KeyRecord, StoreError> {
        let tools = lines_to_column(&key.scope.tools)?;
        let fields = lines_to_column(&key.scope.fields)?;
        let insert = sqlx::query_as(concat!(
            "INSERT INTO api_keys (id, account_id, name, key_hash, scope_tools, scope_fields,
                 cap_month_micros, cap_day_micros, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             RETURNING ",
            key_columns!(),
            ""
        ))
        .bind(key.id.as_str())
        .bind(key.account.as_str())
        .bind(key.name)
        .bind(&key.key_hash.as_bytes()[..])
        .bind(tools)
        .bind(fields)
        .bind(key.caps.month.map(|m| m.0))
        .bind(key.caps.day.map(|d| d.0))
        .bind(now_millis());
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let row: KeyColumns = insert
            .fetch_one(&mut *tx)
            .await
            .map_err(map_write_error)
            .map_err(|e| match e {
                StoreError::Conflict(_) => {
                    StoreError::Conflict("the account has a live key of this name")
                }
                other => other,
            })?;
        self.commit_bumping(tx).await?;
        Ok(key_record_from_columns(row))
    }

    async fn named_keys(&self, account: &AccountId) -> Result<Vec<KeyRecord>, StoreError> {
        let rows: Vec<KeyColumns> = sqlx::query_as(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys WHERE account_id = $1 ORDER BY created_at, id"
        ))
        .bind(account.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(rows.into_iter().map(key_record_from_columns).collect())
    }

    async fn revoke_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
    ) -> Result<(KeyRecord, bool), StoreError> {
        let revoke = sqlx::query_as(concat!(
            "UPDATE api_keys SET revoked_at = $3
             WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL
             RETURNING ",
            key_columns!(),
            ""
        ))
        .bind(id.as_str())
        .bind(account.as_str())
        .bind(now_millis());
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let revoked: Option<KeyColumns> =
            revoke.fetch_optional(&mut *tx).await.map_err(map_error)?;
        self.commit_bumping(tx).await?;
        match revoked {
            Some(row) => Ok((key_record_from_columns(row), true)),
            None => Ok((self.key_of(account, id).await?, false)),
        }
    }

    async fn change_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
        change: KeyChange<'_>,
    ) -> Result<KeyRecord, StoreError> {
        let tools = change
            .scope
            .map(|s| lines_to_column(&s.tools))
            .transpose()?;
        let fields = change
            .scope
            .map(|s| lines_to_column(&s.fields))
            .transpose()?;
        // caps given replace both columns, a `None` in them meaning no cap
        let update = sqlx::query_as(concat!(
            "UPDATE api_keys SET
                 cap_month_micros = CASE WHEN $3::boolean THEN $4 ELSE cap_month_micros END,
                 cap_day_micros = CASE WHEN $3::boolean THEN $5 ELSE cap_day_micros END,
                 scope_tools = COALESCE($6, scope_tools),
                 scope_fields = COALESCE($7, scope_fields)
             WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL
             RETURNING ",
            key_columns!(),
            ""
        ))
        .bind(id.as_str())
        .bind(account.as_str())
        .bind(change.caps.is_some())
        .bind(change.caps.and_then(|c| c.month).map(|m| m.0))
        .bind(change.caps.and_then(|c| c.day).map(|d| d.0))
        .bind(tools)
        .bind(fields);
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let row: Option<KeyColumns> = update.fetch_optional(&mut *tx).await.map_err(map_error)?;
        self.commit_bumping(tx).await?;
        row.map(key_record_from_columns).ok_or(StoreError::NotFound)
    }

    async fn record_key_uses(&self, uses: &[(KeyId, i64)]) -> Result<(), StoreError> {
        if uses.is_empty() {
            return Ok(());
        }
        let (ids, times): (Vec<&str>, Vec<i64>) =
            uses.iter().map(|(id, at)| (id.as_str(), *at)).unzip();
        sqlx::query(
            "UPDATE api_keys SET last_used_at = GREATEST(COALESCE(api_keys.last_used_at, 0), u.at)
             FROM UNNEST($1::text[], $2::bigint[]) AS u (id, at)
             WHERE api_keys.id = u.id",
        )
        .bind(ids)
        .bind(times)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(())
    }
}
