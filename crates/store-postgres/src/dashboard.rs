//! What the dashboard stores: sign-in links, sessions, the sealed key and the history it shows.
//! Tokens arrive hashed, and no error carries a hash, an address or a sealed byte: PostgreSQL's
//! error text is its message only, never the DETAIL that echoes a row.

use async_trait::async_trait;
use toolgate_domain::{Account, AccountId, Email, KeyHash, Micros, MonthKey, SealedSecret};
use toolgate_store::{
    DailyCalls, History, NewSignInSession, SealedKeys, SignIns, SingleUseLinks, StoreError,
    TokenHash, WalletCredit, WalletEntry, account_from_columns, now_millis, sealed_from_columns,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error, version_to_column};

/// The sealed key's columns, all NULL when none is stored.
type SealedColumns = (Option<i32>, Option<Vec<u8>>, Option<Vec<u8>>);

#[async_trait]
impl SignIns for PgStore {
    async fn put_sign_in_link(
        &self,
        token_hash: &TokenHash,
        email: &Email,
        created_at: i64,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sign_in_links (token_hash, email, created_at, expires_at)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&token_hash[..])
        .bind(email.as_str())
        .bind(created_at)
        .bind(expires_at)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(())
    }

    async fn peek_sign_in_link(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError> {
        let email: Option<String> = sqlx::query_scalar(
            "SELECT email FROM sign_in_links
             WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2",
        )
        .bind(&token_hash[..])
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        email.as_deref().map(link_email).transpose()
    }

    async fn use_sign_in_link(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError> {
        // One guarded statement: whichever caller marks the row first gets the address, and the
        // guard makes every later one match nothing.
        let email: Option<String> = sqlx::query_scalar(
            "UPDATE sign_in_links SET used_at = $2
             WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2
             RETURNING email",
        )
        .bind(&token_hash[..])
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        email.as_deref().map(link_email).transpose()
    }

    async fn count_sign_in_links(&self, email: &Email, since: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM sign_in_links WHERE email = $1 AND created_at >= $2",
        )
        .bind(email.as_str())
        .bind(since)
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)
    }

    async fn create_sign_in_session(&self, session: &NewSignInSession) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO web_sessions (token_hash, account_id, created_at, expires_at)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&session.token_hash[..])
        .bind(session.account.as_str())
        .bind(now_millis())
        .bind(session.expires_at)
        .execute(&self.pool)
        .await
        .map_err(map_write_error)?;
        Ok(())
    }

    async fn find_sign_in_session(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Account>, StoreError> {
        let row: Option<(String, String, String, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT a.id, a.email, a.tier, a.cap_month_micros, a.cap_day_micros FROM web_sessions s
             JOIN accounts a ON a.id = s.account_id
             WHERE s.token_hash = $1 AND s.expires_at > $2",
        )
        .bind(&token_hash[..])
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        row.map(|(id, email, tier, month, day)| {
            account_from_columns(id, &email, tier, (month, day))
        })
        .transpose()
    }

    async fn end_sign_in_session(&self, token_hash: &TokenHash) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM web_sessions WHERE token_hash = $1")
            .bind(&token_hash[..])
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn end_all_sign_in_sessions(&self, account: &AccountId) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM web_sessions WHERE account_id = $1")
            .bind(account.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn purge_expired(&self, now: i64) -> Result<u64, StoreError> {
        // One statement, so the tables are purged at one snapshot in one round trip.
        let purged: i64 = sqlx::query_scalar(
            "WITH links AS (DELETE FROM sign_in_links WHERE expires_at < $1 RETURNING 1),
                  sessions AS (DELETE FROM web_sessions WHERE expires_at < $1 RETURNING 1),
                  uses AS (DELETE FROM used_links WHERE expires_at < $1 RETURNING 1)
             SELECT (SELECT COUNT(*) FROM links) + (SELECT COUNT(*) FROM sessions)
                  + (SELECT COUNT(*) FROM uses)",
        )
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)?;
        // COUNT is never negative; the fallback only satisfies the type.
        Ok(u64::try_from(purged).unwrap_or(0))
    }
}

#[async_trait]
impl SingleUseLinks for PgStore {
    async fn use_link_once(
        &self,
        token_hash: &TokenHash,
        expires_at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO used_links (token_hash, expires_at) VALUES ($1, $2)
             ON CONFLICT (token_hash) DO NOTHING",
        )
        .bind(&token_hash[..])
        .bind(expires_at)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl SealedKeys for PgStore {
    async fn put_sealed_key(
        &self,
        account: &AccountId,
        key_hash: &KeyHash,
        sealed: &SealedSecret,
    ) -> Result<bool, StoreError> {
        // Guarded by the key hash: a rotation that committed first leaves this matching nothing,
        // so the sealed copy of a replaced key is never stored over the forgetting.
        let done = sqlx::query(
            "UPDATE accounts SET key_sealed_version = $3, key_wrapped = $4, key_ciphertext = $5
             WHERE id = $1 AND key_hash = $2",
        )
        .bind(account.as_str())
        .bind(&key_hash.as_bytes()[..])
        .bind(version_to_column(sealed.key_version)?)
        .bind(sealed.wrapped_key.as_slice())
        .bind(sealed.ciphertext.as_slice())
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn sealed_key(&self, account: &AccountId) -> Result<Option<SealedSecret>, StoreError> {
        let row: Option<SealedColumns> = sqlx::query_as(
            "SELECT key_sealed_version, key_wrapped, key_ciphertext FROM accounts WHERE id = $1",
        )
        .bind(account.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        match row {
            None | Some((None, None, None)) => Ok(None),
            Some((Some(version), Some(wrapped_key), Some(ciphertext))) => {
                sealed_from_columns(i64::from(version), wrapped_key, ciphertext).map(Some)
            }
            // The table's CHECK keeps the three together; only a hand edit splits them.
            Some(_) => Err(StoreError::Unavailable(
                "corrupt accounts row: sealed key".to_owned(),
            )),
        }
    }
}

#[async_trait]
impl History for PgStore {
    async fn daily_calls(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<DailyCalls>, StoreError> {
        // The month column picks the rows (its index serves the look-up); the day is read from
        // the row's own time, in UTC as month keys are.
        // SUM of BIGINT is NUMERIC in PostgreSQL, and EXTRACT too: both are cast back.
        let rows: Vec<(i32, i64, i64, i64)> = sqlx::query_as(
            "SELECT CAST(EXTRACT(DAY FROM (to_timestamp(created_at / 1000.0) AT TIME ZONE 'UTC'))
                         AS INTEGER) AS day,
                    COUNT(*) FILTER (WHERE paid_from = 'free'),
                    COUNT(*) FILTER (WHERE paid_from = 'wallet'),
                    CAST(COALESCE(SUM(cost_micros) FILTER (WHERE paid_from = 'wallet'), 0)
                         AS BIGINT)
             FROM call_ledger WHERE account_id = $1 AND month = $2
             GROUP BY day ORDER BY day",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(day, free, paid, paid_cost)| {
                Ok(DailyCalls {
                    day: day_from_column(i64::from(day))?,
                    free,
                    paid,
                    paid_cost: Micros(paid_cost),
                })
            })
            .collect()
    }

    async fn wallet_credits(
        &self,
        account: &AccountId,
        limit: u32,
    ) -> Result<Vec<WalletCredit>, StoreError> {
        // Credits and take-backs (negative). COLLATE "C": ties in time break in byte order, as on
        // SQLite, whatever the locale.
        let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
            "SELECT reference, amount, created_at, kind FROM (
                 SELECT reference, amount_micros AS amount, created_at, 'credit' AS kind
                 FROM wallet_credits
                 WHERE account_id = $1
                 UNION ALL
                 SELECT reference, -amount_micros, created_at,
                        CASE WHEN dispute IS NULL THEN 'refund' ELSE 'dispute' END
                 FROM wallet_takebacks
                 WHERE account_id = $1) AS history
             ORDER BY created_at DESC, reference COLLATE \"C\" DESC LIMIT $2",
        )
        .bind(account.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(reference, amount, at, kind)| {
                Ok(WalletCredit {
                    reference,
                    amount: Micros(amount),
                    at,
                    kind: WalletEntry::from_column(&kind)?,
                })
            })
            .collect()
    }
}

/// A link's stored address; a malformed one means corrupt storage.
fn link_email(raw: &str) -> Result<Email, StoreError> {
    Email::parse(raw)
        .map_err(|_| StoreError::Unavailable("corrupt sign_in_links row: email".to_owned()))
}

/// A day of the month as the ledger query computes it; outside 1–31 means a corrupt time.
fn day_from_column(day: i64) -> Result<u8, StoreError> {
    u8::try_from(day)
        .ok()
        .filter(|d| (1..=31).contains(d))
        .ok_or_else(|| StoreError::Unavailable("corrupt call_ledger row: created_at".to_owned()))
}
