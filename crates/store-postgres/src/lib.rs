//! The PostgreSQL backend, for deployments that run more than one instance or already operate
//! a database server. Same tables, columns and behaviour as the SQLite backend.
//!
//! Admissions are group-committed per process (`batch`): a batcher task decides the calls
//! waiting at the moment in one transaction. Exactness under concurrency, also between
//! processes, comes from the accounts' row locks and guarded updates, not from a single writer.

mod admit;
mod batch;
mod call_history;
mod capped;
mod dashboard;
mod host_lists;
mod job;
mod key_epoch;
mod known;
mod mcp_sessions;
mod money;
mod named_keys;
mod oauth;
mod placement;
mod rows;
mod secrets;
mod spend;
mod tasks;
#[cfg(feature = "testkit")]
pub mod testkit;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use toolgate_domain::{
    Account, AccountId, Admission, Email, KeyHash, Micros, MonthKey, UsageSnapshot,
};
use toolgate_store::{
    Accounts, CallCharge, Decided, Metering, NewAccount, StoreError, account_from_columns,
    key_hash_from_column, now_millis,
};

use crate::batch::{Admissions, BATCHERS};
use crate::key_epoch::KeyEpoch;
use crate::rows::map_error;

/// Connections per process; calls of one account serialise on its rows anyway, so more
/// connections would mostly add server load.
const POOL_SIZE: u32 = 16;
/// A request waiting longer than this for a connection fails as unavailable rather than
/// hanging while the database is down or saturated.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Store backed by a PostgreSQL database.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    admissions: Admissions,
    key_epoch: Arc<KeyEpoch>,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`), migrates it
    /// and starts the admission batcher (so it must run inside a Tokio runtime).
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(url)
            .await
            // The driver's text names the failure, never the URL, so the password stays out.
            .map_err(|e| StoreError::Unavailable(format!("cannot connect to PostgreSQL: {e}")))?;
        // Concurrent instances starting together are safe: sqlx holds an advisory lock while migrating.
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| StoreError::Unavailable(format!("migration failed: {e}")))?;
        let admissions = Admissions::start(&pool, BATCHERS);
        let key_epoch = Arc::new(KeyEpoch::listen(url));
        Ok(PgStore {
            pool,
            admissions,
            key_epoch,
        })
    }

    /// Closes every connection, waiting for those in use to be returned.
    pub async fn close(&self) {
        self.key_epoch.stop();
        self.pool.close().await;
    }
}

#[async_trait]
impl Accounts for PgStore {
    fn key_epoch(&self) -> Option<u64> {
        self.key_epoch.current()
    }

    async fn create_account(&self, account: &NewAccount) -> Result<Account, StoreError> {
        let tier: String = sqlx::query_scalar(
            "INSERT INTO accounts (id, email, key_hash, created_at) VALUES ($1, $2, $3, $4)
             RETURNING tier",
        )
        .bind(account.id.as_str())
        .bind(account.email.as_str())
        .bind(&account.key_hash.as_bytes()[..])
        .bind(now_millis())
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(Account {
            id: account.id.clone(),
            email: account.email.clone(),
            tier,
            caps: Default::default(),
            via: Default::default(),
        })
    }

    async fn find_by_key_hash(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Account, KeyHash)>, StoreError> {
        let row: Option<(String, String, String, Option<i64>, Option<i64>, Vec<u8>)> =
            sqlx::query_as("SELECT id, email, tier, cap_month_micros, cap_day_micros, key_hash FROM accounts WHERE key_hash = $1")
                .bind(&hash.as_bytes()[..])
                .fetch_optional(&self.pool)
                .await
                .map_err(map_error)?;
        match row {
            Some((id, email, tier, month, day, stored)) => Ok(Some((
                account_from_columns(id, &email, tier, (month, day))?,
                key_hash_from_column(&stored)?,
            ))),
            // a named key costs a second indexed look-up only when no first key matched
            None => self.find_by_named_key(hash).await,
        }
    }

    async fn find_by_email(&self, email: &Email) -> Result<Option<Account>, StoreError> {
        let row: Option<(String, String, String, Option<i64>, Option<i64>)> =
            sqlx::query_as("SELECT id, email, tier, cap_month_micros, cap_day_micros FROM accounts WHERE email = $1")
                .bind(email.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(map_error)?;
        row.map(|(id, email, tier, month, day)| {
            account_from_columns(id, &email, tier, (month, day))
        })
        .transpose()
    }

    async fn replace_key(&self, account: &AccountId, new_hash: &KeyHash) -> Result<(), StoreError> {
        // The sealed copy belongs to the old key: forgetting it in the same statement means no
        // reader ever sees the new hash beside the old key's sealed copy.
        // Every store's key cache hears of it when it commits (see `key_epoch`); this one's
        // moves on at once, and also when the outcome is unknown.
        let done = sqlx::query(
            "WITH rotated AS (
                 UPDATE accounts SET key_hash = $1, key_rotated_at = $2,
                     key_sealed_version = NULL, key_wrapped = NULL, key_ciphertext = NULL
                 WHERE id = $3 RETURNING 1)
             SELECT pg_notify($4, '') FROM rotated",
        )
        .bind(&new_hash.as_bytes()[..])
        .bind(now_millis())
        .bind(account.as_str())
        .bind(key_epoch::CHANNEL)
        .execute(&self.pool)
        .await;
        self.key_epoch.rotated();
        let done = done.map_err(map_error)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::NotFound)
        }
    }
}

#[async_trait]
impl Metering for PgStore {
    async fn admit_call(&self, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
        let decided = self.decide_call(charge).await?;
        decided.recorded.wait().await?;
        Ok(decided.admission)
    }

    async fn decide_call(&self, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
        if charge.capped {
            return capped::decide(&self.pool, charge).await;
        }
        self.admissions.decide(charge).await
    }

    async fn credit_wallet(
        &self,
        account: &AccountId,
        amount: Micros,
        reference: &str,
    ) -> Result<(Micros, bool), StoreError> {
        money::credit(&self.pool, account, amount, reference, None).await
    }

    async fn usage(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<UsageSnapshot, StoreError> {
        let row: Option<(i64, Option<i64>)> = sqlx::query_as(
            "SELECT a.wallet_micros - a.owed_micros, u.free_used FROM accounts a
             LEFT JOIN monthly_usage u ON u.account_id = a.id AND u.month = $2
             WHERE a.id = $1",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        let (wallet, free_used) = row.ok_or(StoreError::NotFound)?;
        Ok(UsageSnapshot {
            free_used: free_used.unwrap_or(0),
            wallet: Micros(wallet),
        })
    }

    async fn ledger_counts(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<(i64, i64), StoreError> {
        let (free, paid): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*) FILTER (WHERE paid_from = 'free'), COUNT(*) FILTER (WHERE paid_from = 'wallet')
             FROM call_ledger WHERE account_id = $1 AND month = $2",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)?;
        Ok((free, paid))
    }
}
